// Package preflight checks, read-only and in seconds, whether a Redis or
// Valkey deployment is configured so that prim's primitives can be safe on it,
// and which of their guarantees it can keep: the server and its version, what
// each primitive needs (learned from the server's own answers, as prim learns
// them), eviction, persistence, replication, Sentinel and Cluster health, the
// client-versus-server clock offset, a few limits, and the connected user's
// ACL permissions (ACL DRYRUN).
//
// Every check is a [Check] line, OK, WARN or FAIL, with a one-line reason and
// what to change; [Report.Guarantees] ties each guarantee to the harness
// scenario that shows the hazard when it does not hold.
//
// Preflight writes nothing (unless [Options.WriteProbe] asks it to): it reads INFO and CONFIG, runs a script that only
// reads the server's clock, and probes commands on the first of
// [Options.Keys] (a random key that does not exist without them) in forms
// that cannot create or change it (HPTTL, DELEX … IFEQ, SET … IFEQ, whose
// comparison value is random). The script cache and the connection list are
// the only server state it touches, and the ACL log when ACL DRYRUN cannot be
// used: the commands it then queues in a discarded transaction (never run)
// are logged there when the ACL denies them.
//
// The harness's packages use it; prim does not import it.
package preflight

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/internal/tlsopt"
)

// Status is a check's outcome.
type Status string

// The outcomes, from best to worst.
const (
	OK   Status = "OK"
	Warn Status = "WARN"
	Fail Status = "FAIL"
)

// Check is one line of the report.
type Check struct {
	// Name names the check: "server", "maxmemory-policy", "acl/fenced-lock"…
	Name   string `json:"check"`
	Status Status `json:"status"`
	// Reason is one line: what was found.
	Reason string `json:"reason"`
	// Fix is what to change, empty when nothing needs to.
	Fix string `json:"fix,omitempty"`
	// Scenario is the harness scenario that shows the hazard, when there is one.
	Scenario string `json:"scenario,omitempty"`
}

// Guarantee is one line of the closing summary: a guarantee and whether it
// holds on the deployment, with the scenario that shows what happens when it
// does not.
type Guarantee struct {
	Guarantee string `json:"guarantee"`
	Holds     bool   `json:"holds"`
	// Unchecked: what it depends on could not be read (Holds is false).
	Unchecked bool   `json:"unchecked,omitempty"`
	Reason    string `json:"reason"`
	Scenario  string `json:"scenario"`
}

// Report is everything a preflight found.
type Report struct {
	Target   string `json:"target"`
	Topology string `json:"topology"` // standalone, sentinel or cluster
	Server   string `json:"server"`   // redis or valkey
	Version  string `json:"version"`
	User     string `json:"user"`
	// SentinelUser is the user the sentinels were asked as (with a master
	// name): "default" without Options.SentinelUsername.
	SentinelUser string      `json:"sentinel_user,omitempty"`
	Checks       []Check     `json:"checks"`
	Guarantees   []Guarantee `json:"guarantees"`
}

// Failed reports whether any check is FAIL.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Status == Fail })
}

// Count returns how many checks have status s.
func (r *Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

// Primitive names, as --primitives takes them.
const (
	FencedLock   = "fenced-lock"
	Waiting      = "waiting"
	HashLease    = "hash-lease"
	RWLease      = "rw-lease"
	Semaphore    = "semaphore"
	Latch        = "latch"
	RateLimiters = "rate-limiters"
	Redlock      = "redlock"
)

// Primitives lists every primitive preflight knows, in report order.
func Primitives() []string {
	return []string{FencedLock, Waiting, HashLease, RWLease, Semaphore, Latch, RateLimiters, Redlock}
}

// ErrUsage marks bad options (no address, an unknown primitive).
var ErrUsage = errors.New("preflight: bad options")

// ErrConnect marks a deployment that could not be reached.
var ErrConnect = errors.New("preflight: cannot reach the deployment")

// Options says what to check and how to connect.
type Options struct {
	// Addrs: one address (standalone, or a cluster's endpoint with Cluster),
	// several for a cluster, or the sentinels' with MasterName.
	Addrs      []string
	MasterName string
	Cluster    bool
	Username   string
	Password   string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (with MasterName), as go-redis's failover client does with its
	// options of those names: the sentinels keep their own users, and the
	// data user's credentials are never sent to them. Both empty: the
	// sentinels' default user, without AUTH.
	SentinelUsername string
	SentinelPassword string
	// TLS connects with TLS: with TLSConfig, or a default configuration
	// (the system's CAs) without.
	TLS       bool
	TLSConfig *tls.Config
	// Primitives restricts the report to the primitives a service uses
	// (default: all): the capability probes they need, the primitive and
	// ACL lines, the wording and scenarios of the configuration lines, and
	// the guarantees. An evicting policy is a FAIL only when fenced-lock is
	// among them.
	Primitives []string
	// Keys are keys of the service's, one per key pattern its ACL user
	// names, so the ACL checks match those patterns (default
	// "coordtorture:preflight"); each is checked; derived keys append ":…".
	// The capability probes run on the first (in forms that cannot write
	// it), and the write probe's keys are under it.
	Keys []string
	// ClockWarn: a client-versus-server clock offset above it is a WARN
	// (default 100ms).
	ClockWarn time.Duration
	// Timeout bounds each command (default 2s).
	Timeout time.Duration
	// WriteProbe also runs each primitive in use once, through prim, on keys
	// under a random "coordtorture:preflight:probe:…:" prefix, and deletes
	// them afterwards: the only mode that writes.
	WriteProbe bool
	// Dialer, when set, opens every TCP connection (the tests' source
	// addresses; a proxy); with TLS the handshake is done over it.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Run checks the deployment. The error matches ErrUsage or ErrConnect; a
// deployment that answers always gives a report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.Addrs) == 0 || slices.Contains(o.Addrs, "") {
		return nil, fmt.Errorf("%w: no address", ErrUsage)
	}
	if o.MasterName != "" && o.Cluster {
		return nil, fmt.Errorf("%w: --master-name and --cluster exclude each other", ErrUsage)
	}
	if o.SentinelUsername != "" && o.SentinelPassword == "" {
		// go-redis authenticates only with a password: the name alone
		// would silently ask the sentinels as their default user.
		return nil, fmt.Errorf("%w: the sentinel user %s needs its password ($COORDTORTURE_SENTINEL_PASSWORD)", ErrUsage, o.SentinelUsername)
	}
	if len(o.Primitives) == 0 {
		o.Primitives = Primitives()
	}
	for _, p := range o.Primitives {
		if !slices.Contains(Primitives(), p) {
			return nil, fmt.Errorf("%w: unknown primitive %q (%s)", ErrUsage, p, strings.Join(Primitives(), ", "))
		}
	}
	o.Keys = slices.DeleteFunc(slices.Clone(o.Keys), func(k string) bool { return k == "" })
	keysGiven := len(o.Keys) > 0
	if !keysGiven {
		o.Keys = []string{"coordtorture:preflight"}
	}
	if o.ClockWarn <= 0 {
		o.ClockWarn = 100 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.TLS && o.TLSConfig == nil {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	p := &run{o: o, keysGiven: keysGiven, r: &Report{Target: strings.Join(o.Addrs, ","), Topology: "standalone"}}
	// One connection first, as the clients will connect: a plaintext client
	// on a TLS-only port (or the reverse) is told so at once, not after the
	// client's retries.
	tr, err := tlsopt.ProbeAny(ctx, o.Addrs, o.TLSConfig, o.Dialer, o.Timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnect, err) // err starts with the address
	}
	p.transport = tr
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	defer p.close()
	p.checkAll(ctx)
	return p.r, nil
}

type run struct {
	o Options
	// keysGiven: the keys are the service's (--key), not the default.
	keysGiven bool
	// probeKey is the key the capability probes ran on.
	probeKey  string
	transport tlsopt.Result
	r         *Report
	client    redis.UniversalClient
	nodes     []*redis.Client // the primaries
	caps      caps
	facts     facts
}

// caps is what the server answered to the fast commands; refused holds,
// for a probe the ACL refused (denied), the server's answer.
type caps struct {
	lua, tracking, hfe, delex, setIfeq, increx tristate
	refused                                    map[*tristate]string
}

// facts are what the guarantees are decided from.
type facts struct {
	evicting, evictingNoLimit bool
	noPersistence, rdbOnly    bool
	replicas                  int
	aclKillDenied             bool
	memUnknown, diskUnknown   bool // the policy or the persistence could not be read
	replUnknown               bool // the replication could not be read
	aclChecked                bool
	waitDenied                bool
}

// tristate: a capability present, absent, not known (the probe failed or
// was not sent), or denied: the user may not run the probe (an ACL
// refusal), which the primitives that need it cannot do without.
type tristate int

const (
	unknown tristate = iota
	present
	absent
	denied
)

func (p *run) uses(prim string) bool { return slices.Contains(p.o.Primitives, prim) }

func (p *run) add(c Check) { p.r.Checks = append(p.r.Checks, c) }

func (p *run) connect(ctx context.Context) error {
	uo := &redis.UniversalOptions{Addrs: p.o.Addrs, MasterName: p.o.MasterName, IsClusterMode: p.o.Cluster,
		Username: p.o.Username, Password: p.o.Password, SentinelUsername: p.o.SentinelUsername,
		SentinelPassword: p.o.SentinelPassword, DialTimeout: p.o.Timeout, ReadTimeout: p.o.Timeout,
		WriteTimeout: p.o.Timeout, DisableIdentity: true, Dialer: tlsopt.WrapDialer(p.o.Dialer, p.o.TLSConfig),
		TLSConfig: p.o.TLSConfig}
	switch {
	case p.o.MasterName != "":
		p.r.Topology = "sentinel"
		p.r.SentinelUser = p.o.SentinelUsername
		if p.r.SentinelUser == "" {
			p.r.SentinelUser = "default"
		}
		fc := redis.NewFailoverClient(uo.Failover())
		p.client, p.nodes = fc, []*redis.Client{fc}
	case p.o.Cluster || len(p.o.Addrs) > 1:
		p.r.Topology = "cluster"
		p.client = redis.NewClusterClient(uo.Cluster())
	default:
		c := redis.NewClient(uo.Simple())
		p.client, p.nodes = c, []*redis.Client{c}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*p.o.Timeout+time.Second)
	defer cancel()
	// A refused PING (a user without +ping, which prim's waiting does
	// without) is an answer: the deployment is reached. Any other refusal is
	// not (a cluster client's PING first asks CLUSTER SLOTS: review).
	if err := p.client.Ping(cctx).Err(); err != nil && !tlsopt.PingRefused(err) {
		p.client.Close()
		assumed := ""
		if p.assumed() != "" {
			assumed = " (" + strings.TrimPrefix(p.assumed(), "; ") + ": for a standalone server give one address, for Sentinel --master-name with the sentinels' addresses)"
		}
		return fmt.Errorf("%w %s: %v%s%s", ErrConnect, p.r.Target, err, p.authHint(err), assumed)
	}
	if cc, ok := p.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(cctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			p.nodes = append(p.nodes, n)
			return nil
		})
		if err != nil || len(p.nodes) == 0 {
			p.client.Close()
			return fmt.Errorf("%w %s: no primary: %v", ErrConnect, p.r.Target, err)
		}
		slices.SortFunc(p.nodes, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	}
	return nil
}

func (p *run) close() { p.client.Close() }

// assumed says what preflight took several addresses without --cluster or
// --master-name for ("" otherwise), for the server line and the error.
func (p *run) assumed() string {
	if len(p.o.Addrs) > 1 && !p.o.Cluster && p.o.MasterName == "" {
		return "; several addresses without --cluster: taken as a Cluster's nodes"
	}
	return ""
}

func (p *run) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.o.Timeout)
}

// label suffixes a per-node check's name with the node when there are several.
func (p *run) label(name string, n *redis.Client) string {
	if len(p.nodes) > 1 {
		return name + " [" + n.Options().Addr + "]"
	}
	return name
}

func (p *run) checkAll(ctx context.Context) {
	p.checkServer(ctx)
	p.checkTLS()
	p.probeCaps(ctx)
	p.checkPrimitives()
	for _, n := range p.nodes {
		p.checkMemory(ctx, n)
	}
	for _, n := range p.nodes {
		p.checkPersistence(ctx, n)
	}
	for _, n := range p.nodes {
		p.checkReplication(ctx, n)
	}
	switch p.r.Topology {
	case "sentinel":
		p.checkSentinels(ctx)
	case "cluster":
		p.checkCluster(ctx)
	}
	for _, n := range p.nodes {
		p.checkClock(ctx, n)
	}
	p.checkLimits(ctx)
	p.checkACL(ctx)
	if p.o.WriteProbe {
		p.writeProbe(ctx)
	}
	p.guarantees()
}

// info returns INFO section as a map.
func info(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if k, v, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(l, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// config returns one CONFIG GET value; ok is false when it cannot be read
// (an ACL refusal, a managed service that renamed CONFIG, an unknown name).
func config(ctx context.Context, c *redis.Client, name string) (string, bool) {
	m, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", false
	}
	v, ok := m[name]
	return v, ok
}

// checkTLS reports how the connection is protected (from the probe of the
// first address).
func (p *run) checkTLS() {
	tr := p.transport
	switch {
	case tr.State == nil:
		p.add(Check{Name: "tls", Status: Warn, Reason: "plaintext connection: commands, data and the password cross the network unencrypted",
			Fix: "serve TLS (tls-port, port 0) and connect with --tls"})
	case tr.Insecure:
		p.add(Check{Name: "tls", Status: Warn, Reason: tr.Describe(), Fix: "give the servers' CA with --tls-ca instead of --tls-insecure"})
	default:
		p.add(Check{Name: "tls", Status: OK, Reason: tr.Describe()})
	}
}

func (p *run) checkServer(ctx context.Context) {
	c := p.nodes[0]
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	if u, err := c.Do(cctx, "ACL", "WHOAMI").Text(); err == nil {
		p.r.User = u
	} else if p.o.Username != "" {
		p.r.User = p.o.Username
	} else {
		p.r.User = "default"
	}
	m, err := info(cctx, c, "server")
	if err != nil {
		// HELLO without a protocol version changes nothing on the
		// connection and names the server and its version.
		reason := "INFO server refused: " + err.Error()
		if hello, herr := c.Do(cctx, "HELLO").Result(); herr == nil {
			if hm, ok := hello.(map[any]any); ok {
				p.r.Server, _ = hm["server"].(string)
				p.r.Version, _ = hm["version"].(string)
			}
		}
		if p.r.Version != "" {
			reason = fmt.Sprintf("%s %s (from HELLO), %s%s; %s", p.r.Server, p.r.Version, p.r.Topology, p.assumed(), reason)
		}
		p.add(Check{Name: "server", Status: Warn, Reason: reason, Fix: "allow INFO for this user (+info)"})
		return
	}
	p.r.Server, p.r.Version = "redis", m["redis_version"]
	if v := m["valkey_version"]; v != "" || m["server_name"] == "valkey" {
		p.r.Server = "valkey"
		if v != "" {
			p.r.Version = v
		}
	}
	major, minor := versionOf(p.r.Version)
	floor := 7
	if p.r.Server == "valkey" {
		floor = 8
	}
	desc := fmt.Sprintf("%s %s, %s", p.r.Server, p.r.Version, p.r.Topology)
	if len(p.nodes) > 1 {
		desc += fmt.Sprintf(" (%d primaries)", len(p.nodes))
	}
	desc += p.assumed()
	for _, other := range p.nodes[1:] {
		if m2, err := info(cctx, other, "server"); err == nil {
			v2 := m2["redis_version"]
			if m2["valkey_version"] != "" {
				v2 = m2["valkey_version"]
			}
			if v2 != p.r.Version {
				p.add(Check{Name: "server", Status: Warn, Reason: desc + ": mixed versions (" + other.Options().Addr + " runs " + v2 + "); the capability lines are the first node's",
					Fix: "finish the upgrade: prim learns each node's commands, preflight asks one"})
				return
			}
		}
	}
	if major < floor {
		p.add(Check{Name: "server", Status: Fail, Reason: desc + fmt.Sprintf(": prim needs Redis 7.0+ or Valkey 8+ (found %d.%d)", major, minor),
			Fix: "upgrade the server"})
		return
	}
	p.add(Check{Name: "server", Status: OK, Reason: desc})
}

func versionOf(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// lacks is prim's rule: "ERR unknown command" is the only evidence that a
// command is absent, and "ERR syntax error" for SET's IFEQ option.
func lacks(err error, setOption bool) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	if strings.HasPrefix(re.Error(), "ERR unknown command") {
		return true
	}
	return setOption && re.Error() == "ERR syntax error"
}

func noperm(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOPERM") }

// judge turns a probe's answer into a tristate: any answer but "unknown
// command" (or an ACL refusal, or a lost reply) means the command exists.
func judge(err error, setOption bool) (tristate, string) {
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		return present, ""
	case lacks(err, setOption):
		msg, _, _ := strings.Cut(err.Error(), ", with args") // the key is random: not worth showing
		return absent, msg
	case noperm(err):
		return denied, err.Error()
	}
	var re redis.Error
	if errors.As(err, &re) {
		return present, "" // the server knows it: it answered about the arguments
	}
	return unknown, err.Error()
}

func randomHex() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// probeCaps asks the server, as prim does, with commands that cannot write,
// what the primitives in use need (Options.Primitives): the others' lines
// are left out. The key probes run on the first --key (Options.Keys), which
// the user's ACL allows, in forms that cannot create or change it (HPTTL
// reads; DELEX and SET compare with a random value), or without --key on a
// random key that does not exist.
func (p *run) probeCaps(ctx context.Context) {
	// Seven probes, each bounded by the client's read timeout (Timeout).
	cctx, cancel := context.WithTimeout(ctx, 8*p.o.Timeout)
	defer cancel()
	p.caps.refused = map[*tristate]string{}
	key := "coordtorture:preflight:probe:" + randomHex() // does not exist
	if p.keysGiven {
		key = p.o.Keys[0]
	}
	p.probeKey = key
	token := randomHex()
	var why string
	probe := func(t *tristate, err error, setOption bool) {
		*t, why = judge(err, setOption)
		if *t == denied {
			p.caps.refused[t] = why
		}
	}

	// Lua and TIME (the rw leases, semaphores and rate limiters read the
	// server's clock inside their scripts; effects replication is what lets
	// a script write after TIME, always on in Redis 7+ and Valkey). Every
	// primitive runs scripts.
	err := p.client.Eval(cctx, "return redis.call('TIME')", nil).Err()
	probe(&p.caps.lua, err, false)
	if err != nil && p.caps.lua == present {
		p.caps.lua, why = absent, err.Error() // a script error: scripting is unusable
	}
	p.capLine("lua+time", p.caps.lua, why, "EVAL of a script calling TIME works (effects replication: writes after TIME are allowed)",
		"scripting must be enabled (every primitive runs Lua scripts)")

	// CLIENT TRACKING with REDIRECT, on two connections of their own.
	if p.uses(Waiting) || p.uses(Latch) {
		p.caps.tracking, why = p.probeTracking(cctx)
		if p.caps.tracking == denied {
			p.caps.refused[&p.caps.tracking] = why
		}
		p.capLine("client-tracking", p.caps.tracking, why, "CLIENT TRACKING ON REDIRECT works: waiters wake on invalidations",
			"waiting acquisitions and latch waits fall back to polling")
	}

	// Hash-field expiry: HPTTL of a field (read-only).
	if p.uses(HashLease) {
		probe(&p.caps.hfe, p.client.Do(cctx, "HPTTL", key, "FIELDS", 1, "f").Err(), false)
		p.capLine("hash-field-expiry", p.caps.hfe, why, "HPTTL/HPEXPIRE exist (Redis 7.4+, Valkey 9+)",
			"hash-field leases need Redis 7.4+ or Valkey 9+ (ErrFeatureUnsupported)")
	}

	if p.uses(FencedLock) || p.uses(Waiting) {
		// DELEX key IFEQ random: never equal, so nothing can be deleted.
		probe(&p.caps.delex, p.client.Do(cctx, "DELEX", key, "IFEQ", token).Err(), false)
		p.capLine("delex", p.caps.delex, why, "DELEX … IFEQ exists: releases are one command",
			"releases use the release script (same guarantees, more server work)")

		// SET key v IFEQ random PX: never equal, and never creates a
		// missing key.
		probe(&p.caps.setIfeq, p.client.Do(cctx, "SET", key, token, "IFEQ", token+"x", "PX", 1000).Err(), true)
		p.capLine("set-ifeq", p.caps.setIfeq, why, "SET … IFEQ … PX exists: renewals are one command",
			"renewals use the renewal script (same guarantees, more server work)")
	}

	if p.uses(RateLimiters) {
		// INCREX: the command itself could create its key, so the server's
		// command table answers instead (COMMAND INFO: an empty entry when absent).
		v, err := p.client.Do(cctx, "COMMAND", "INFO", "INCREX").Slice()
		switch {
		case err != nil:
			p.caps.increx, why = unknown, err.Error()
		case len(v) == 0 || v[0] == nil:
			p.caps.increx, why = absent, "COMMAND INFO INCREX: no such command"
		default:
			p.caps.increx = present
		}
		p.capLine("increx", p.caps.increx, why, "INCREX exists (Redis 8.8+): the fixed window is one command",
			"the fixed-window limiter uses its script (same guarantees)")
	}
}

// capLine adds a capability line: absent fast paths are OK (prim falls back),
// absent needs are settled by the primitive lines, and so are refusals (a
// FAIL there for a primitive that cannot do without).
func (p *run) capLine(name string, t tristate, why, yes, no string) {
	switch t {
	case present:
		p.add(Check{Name: "capability/" + name, Status: OK, Reason: yes})
	case absent:
		p.add(Check{Name: "capability/" + name, Status: OK, Reason: "absent (" + why + "): " + no})
	case denied:
		p.add(Check{Name: "capability/" + name, Status: Warn, Reason: "not probed: this user may not run it (" + why + "); the primitive lines say what that costs",
			Fix: "grant it to the user (go doc ./prim lists each primitive's permissions)"})
	default:
		p.add(Check{Name: "capability/" + name, Status: Warn, Reason: "could not be probed: " + why,
			Fix: "allow the command for this user, or check it by hand"})
	}
}

func (p *run) probeTracking(ctx context.Context) (tristate, string) {
	var c *redis.Client
	if len(p.nodes) > 0 {
		c = p.nodes[0]
	}
	if c == nil {
		return unknown, "no node"
	}
	target := c.Conn()
	defer target.Close()
	id, err := target.ClientID(ctx).Result()
	if err != nil {
		t, why := judge(err, false)
		if t == present {
			t = unknown
		}
		return t, "CLIENT ID: " + why
	}
	tr := c.Conn()
	defer tr.Close()
	err = tr.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err()
	if err == nil {
		_ = tr.Do(ctx, "CLIENT", "TRACKING", "OFF").Err()
		return present, ""
	}
	if noperm(err) {
		return denied, err.Error()
	}
	var re redis.Error
	if errors.As(err, &re) {
		return absent, err.Error() // unknown subcommand, or tracking refused
	}
	return unknown, err.Error()
}

// checkPrimitives says, per primitive in use, whether what it needs exists
// and whether the user may use it: a need whose probe the ACL refused
// (denied) is FAIL, as an absent one: the primitive cannot work for this
// user (a soft need, a WARN: it works degraded).
func (p *run) checkPrimitives() {
	type req = struct {
		t    tristate
		what string
		soft bool   // WARN: the primitive works without, degraded
		fix  string // the grant when the user is refused it
	}
	need := func(prim string, reqs ...req) {
		if !p.uses(prim) {
			return
		}
		st, var_ := OK, []string{}
		fix := ""
		for _, r := range reqs {
			switch r.t {
			case absent:
				if r.soft {
					st = worse(st, Warn)
				} else {
					st = Fail
				}
				var_ = append(var_, r.what+" missing")
				if fix == "" {
					switch {
					case r.soft:
						fix = "a server with CLIENT TRACKING (Redis 6+, Valkey): without it waiting polls"
					case r.what == "hash-field expiry":
						fix = "upgrade to Redis 7.4+ or Valkey 9+, or leave hash-lease out of --primitives"
					default:
						fix = "enable Lua scripting (EVAL, EVALSHA)"
					}
				}
			case denied:
				why := p.caps.refused[p.capOf(r.what)]
				if r.soft {
					st = worse(st, Warn)
					var_ = append(var_, r.what+" refused to this user ("+why+"): waiting polls")
				} else {
					st = Fail
					var_ = append(var_, r.what+" refused to this user ("+why+"): "+prim+" cannot work")
				}
				if fix == "" {
					fix = "ACL SETUSER " + p.userName() + " " + r.fix + " (go doc ./prim lists " + prim + "'s permissions)"
					if strings.Contains(why, "access a key") {
						fix = "the probe ran on " + p.probeKey + ", which the user's key patterns do not cover: give a key of the service's with --key (or grant the pattern)"
					}
				}
			case unknown:
				st = worse(st, Warn)
				var_ = append(var_, r.what+" not checked")
				if fix == "" {
					fix = "allow the probe commands for this user"
				}
			}
		}
		if len(var_) == 0 {
			names := make([]string, len(reqs))
			for i, r := range reqs {
				names[i] = r.what
			}
			p.add(Check{Name: "primitive/" + prim, Status: OK, Reason: "has what it needs: " + strings.Join(names, ", ")})
			return
		}
		p.add(Check{Name: "primitive/" + prim, Status: st, Reason: strings.Join(var_, "; "), Fix: fix})
	}
	const evalGrant = "+eval +evalsha"
	lua := req{p.caps.lua, "Lua", false, evalGrant}
	luaTime := req{p.caps.lua, "Lua+TIME", false, evalGrant + " +time"}
	tracking := req{p.caps.tracking, "CLIENT TRACKING", true, "+client|id +client|tracking +subscribe &__redis__:invalidate"}
	need(FencedLock, lua)
	need(Waiting, lua, tracking)
	need(HashLease, lua, req{p.caps.hfe, "hash-field expiry", false, "+hpttl +hpexpire"})
	need(RWLease, luaTime)
	need(Semaphore, luaTime)
	tracking.what = "CLIENT TRACKING (Wait)"
	need(Latch, lua, tracking)
	need(RateLimiters, luaTime)
	need(Redlock, lua)
	if p.uses(Redlock) {
		if c := &p.r.Checks[len(p.r.Checks)-1]; c.Name == "primitive/"+Redlock && c.Status == OK {
			c.Reason += " (a Redlock spans three or more independent deployments: run preflight on each)"
		}
	}
}

// capOf is the capability a primitive line's need names.
func (p *run) capOf(what string) *tristate {
	switch {
	case strings.HasPrefix(what, "Lua"):
		return &p.caps.lua
	case strings.HasPrefix(what, "CLIENT TRACKING"):
		return &p.caps.tracking
	case what == "hash-field expiry":
		return &p.caps.hfe
	}
	return nil
}

// userName is the user the checks ran as, for a grant to name.
func (p *run) userName() string {
	if p.r.User != "" {
		return p.r.User
	}
	if p.o.Username != "" {
		return p.o.Username
	}
	return "default"
}

func worse(a, b Status) Status {
	rank := map[Status]int{OK: 0, Warn: 1, Fail: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func isEvicting(policy string) bool { return policy != "" && policy != "noeviction" }

func (p *run) checkMemory(ctx context.Context, n *redis.Client) {
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	m, err := info(cctx, n, "memory")
	if err != nil {
		p.facts.memUnknown = true
		p.add(Check{Name: p.label("maxmemory-policy", n), Status: Warn, Reason: "INFO memory refused: " + err.Error(), Fix: "allow INFO for this user"})
		return
	}
	policy, limit := m["maxmemory_policy"], m["maxmemory"]
	if policy == "" {
		policy, _ = config(cctx, n, "maxmemory-policy")
	}
	name := p.label("maxmemory-policy", n)
	switch {
	case policy == "":
		p.facts.memUnknown = true
		p.add(Check{Name: name, Status: Warn, Reason: "could not read the eviction policy", Fix: "check maxmemory-policy is noeviction by hand"})
	case !isEvicting(policy):
		p.add(Check{Name: name, Status: OK, Reason: "noeviction: nothing is evicted (writes fail with OOM when memory is full)"})
	case limit == "0":
		p.facts.evictingNoLimit = true
		p.add(Check{Name: name, Status: Warn, Reason: policy + " with no maxmemory: evicting as soon as a limit is set",
			Fix: "set maxmemory-policy noeviction", Scenario: p.scenarioFor(evictionScenarios)})
	default:
		p.facts.evicting = true
		st := Warn
		reason := policy + ": eviction can drop leases, permits and limiter state"
		if p.uses(FencedLock) {
			st = Fail
			reason = policy + ": eviction can drop fencing counters (tokens regress) and leases"
		}
		p.add(Check{Name: name, Status: st, Reason: reason, Fix: "set maxmemory-policy noeviction (or keep coordination keys on a non-evicting deployment)",
			Scenario: p.scenarioFor(evictionScenarios)})
	}
}

func (p *run) checkPersistence(ctx context.Context, n *redis.Client) {
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	name := p.label("persistence", n)
	m, err := info(cctx, n, "persistence")
	if err != nil {
		p.facts.diskUnknown = true
		p.add(Check{Name: name, Status: Warn, Reason: "INFO persistence refused: " + err.Error(), Fix: "allow INFO for this user"})
		return
	}
	aof := m["aof_enabled"] == "1"
	fsync, fsyncKnown := config(cctx, n, "appendfsync")
	save, saveKnown := config(cctx, n, "save")
	switch {
	case aof && fsyncKnown && fsync == "no":
		p.add(Check{Name: name, Status: Warn, Reason: "appendonly yes, appendfsync no: a crash of the machine loses what the OS had not flushed",
			Fix: "appendfsync everysec (or always)", Scenario: p.scenarioFor(restartScenarios)})
	case aof && fsyncKnown:
		p.add(Check{Name: name, Status: OK, Reason: "appendonly yes, appendfsync " + fsync})
	case aof:
		p.add(Check{Name: name, Status: OK, Reason: "appendonly yes (appendfsync could not be read: CONFIG GET refused)"})
	case saveKnown && strings.TrimSpace(save) != "":
		p.facts.rdbOnly = true
		p.add(Check{Name: name, Status: Warn, Reason: "RDB snapshots only (save " + save + "): a restart loses the writes since the last snapshot; " + p.restartLoses(),
			Fix: "appendonly yes, appendfsync everysec or always", Scenario: p.scenarioFor(restartScenarios)})
	default:
		p.facts.noPersistence = true
		p.add(Check{Name: name, Status: Warn, Reason: "no persistence (appendonly no, no snapshots): a restart empties the dataset; " + p.restartLoses(),
			Fix: "appendonly yes, appendfsync everysec or always", Scenario: p.scenarioFor(restartScenarios)})
	}
}

// Scenarios that show a hazard, per primitive in report order: scenarioFor
// names the first whose primitive is in use, so a report narrowed by
// --primitives names only scenarios of those primitives.
var (
	restartScenarios = []string{FencedLock, "fenced-lock/kill-restart-noaof", Waiting, "fenced-lock/kill-restart-noaof",
		Semaphore, "semaphore/kill-restart-noaof", RateLimiters, "ratelimit/fixed/kill-restart-noaof", Redlock, "redlock/restart-without-persistence"}
	failoverScenarios = []string{FencedLock, "fenced-lock/failover-forced", Waiting, "fenced-lock/failover-forced",
		RWLease, "rwlock/failover-forced", Semaphore, "semaphore/failover-forced", Latch, "latch/failover-forced",
		RateLimiters, "ratelimit/fixed/failover-forced"}
	clusterFailoverScenarios = []string{FencedLock, "fenced-lock/failover-cluster-force", Waiting, "waiting-lock/failover-cluster",
		HashLease, "hash-lease/failover-cluster"}
	leaseFailoverScenarios = []string{Semaphore, "semaphore/failover-forced", FencedLock, "fenced-lock/failover-forced",
		Waiting, "fenced-lock/failover-forced", RWLease, "rwlock/failover-forced", Latch, "latch/failover-forced"}
	evictionScenarios = []string{FencedLock, "fenced-lock/eviction", Waiting, "fenced-lock/eviction"}
	clockScenarios    = []string{FencedLock, "fenced-lock/clock-skew", Waiting, "fenced-lock/clock-skew", RWLease, "rwlock/clock-skew",
		Semaphore, "semaphore/clock-skew", RateLimiters, "ratelimit/fixed/clock-skew", Redlock, "redlock/clock-skew"}
	fencingScenarios = []string{FencedLock, "fenced-lock/lose-replies", Waiting, "fenced-lock/lose-replies",
		Semaphore, "semaphore/partition-client", RWLease, "rwlock/partition-client", HashLease, "hash-lease/partition"}
	trackingScenarios = []string{Waiting, "waiting-lock/lost-notifications", Latch, "latch/lost-notifications"}
)

// scenarioFor is the scenario of pairs (primitive, scenario, …) of the
// first primitive in use; "" when none is.
func (p *run) scenarioFor(pairs []string) string {
	for i := 0; i+1 < len(pairs); i += 2 {
		if p.uses(pairs[i]) {
			return pairs[i+1]
		}
	}
	return ""
}

// usesAny reports whether any of prims is in use.
func (p *run) usesAny(prims ...string) bool { return slices.ContainsFunc(prims, p.uses) }

// fenced reports whether fencing tokens are in use: fenced locks, taken at
// once or waiting.
func (p *run) fenced() bool { return p.usesAny(FencedLock, Waiting) }

// restartLoses says what a restart without persistence costs the
// primitives in use.
func (p *run) restartLoses() string {
	var parts []string
	if p.fenced() {
		parts = append(parts, "fencing tokens may regress")
	}
	if p.usesAny(HashLease, RWLease, Semaphore, Latch, Redlock) || p.fenced() {
		parts = append(parts, "leases, permits and latches are lost")
	}
	if p.uses(RateLimiters) {
		parts = append(parts, "rate limits start over")
	}
	return strings.Join(parts, "; ")
}

// failoverLoses says what a failover to a replica behind can cost the
// primitives in use.
func (p *run) failoverLoses() string {
	var parts []string
	if p.fenced() {
		parts = append(parts, "the last fencing tokens")
	}
	if p.usesAny(FencedLock, Waiting, HashLease, RWLease, Semaphore, Latch) {
		parts = append(parts, "leases, permits and latch counts")
	}
	if p.uses(RateLimiters) {
		parts = append(parts, "the last rate-limit decisions")
	}
	if len(parts) == 0 {
		return "the last writes"
	}
	return strings.Join(parts, ", ")
}

func (p *run) failoverScenario() string {
	if p.r.Topology == "cluster" {
		if sc := p.scenarioFor(clusterFailoverScenarios); sc != "" {
			return sc
		}
	}
	return p.scenarioFor(failoverScenarios)
}

func (p *run) checkReplication(ctx context.Context, n *redis.Client) {
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	name := p.label("replication", n)
	m, err := info(cctx, n, "replication")
	if err != nil {
		p.facts.replUnknown = true
		p.add(Check{Name: name, Status: Warn, Reason: "INFO replication refused: " + err.Error(), Fix: "allow INFO for this user"})
		return
	}
	if m["role"] != "master" {
		p.add(Check{Name: name, Status: Fail, Reason: "connected to a " + m["role"] + ": writes are refused (READONLY)",
			Fix: "point --addr at the primary, or use --master-name / --cluster"})
		return
	}
	replicas, _ := strconv.Atoi(m["connected_slaves"])
	p.facts.replicas += replicas
	minRepl, minKnown := config(cctx, n, "min-replicas-to-write")
	maxLag := int64(-1)
	for i := 0; i < replicas; i++ {
		for _, f := range strings.Split(m["slave"+strconv.Itoa(i)], ",") {
			if v, ok := strings.CutPrefix(f, "lag="); ok {
				if l, err := strconv.ParseInt(v, 10, 64); err == nil && l > maxLag {
					maxLag = l
				}
			}
		}
	}
	if replicas == 0 {
		st, fix := OK, ""
		reason := "primary with no replicas: no failover can lose writes (a lost server is downtime)"
		if p.r.Topology != "standalone" {
			st, fix = Warn, "start replicas: a failover needs one"
			reason = "primary with no connected replica: a failover has nothing to promote"
		}
		p.add(Check{Name: name, Status: st, Reason: reason, Fix: fix})
		return
	}
	desc := fmt.Sprintf("primary, %d replica(s), max lag %ds, min-replicas-to-write %s", replicas, max(maxLag, 0), orUnknown(minRepl, minKnown))
	switch {
	case maxLag > 1:
		p.add(Check{Name: name, Status: Warn, Reason: desc + ": replicas lag; a failover now loses more", Fix: "find why the replicas lag (network, load)", Scenario: p.failoverScenario()})
	case minKnown && minRepl == "0":
		p.add(Check{Name: name, Status: Warn, Reason: desc + ": asynchronous replication; a failover can lose " + p.failoverLoses(),
			Fix: "min-replicas-to-write 1 (min-replicas-max-lag 10) narrows the window; only fencing at the resource closes it", Scenario: p.failoverScenario()})
	default:
		p.add(Check{Name: name, Status: OK, Reason: desc + " (replication stays asynchronous: see the summary)", Scenario: p.failoverScenario()})
	}
}

func orUnknown(v string, ok bool) string {
	if !ok {
		return "unknown"
	}
	return v
}

// authHint says which credentials a refused connection needs: with a master
// name the sentinels are asked first, as the sentinel user.
func (p *run) authHint(err error) string {
	msg := err.Error()
	if p.o.MasterName != "" && strings.Contains(msg, "NOPERM") && strings.Contains(msg, "sentinel") {
		return fmt.Sprintf(" (the sentinel user %s may not ask the sentinels for the primary; on each sentinel: %s)", p.r.SentinelUser, p.sentinelGrant())
	}
	if !strings.Contains(msg, "NOAUTH") && !strings.Contains(msg, "WRONGPASS") && !strings.Contains(msg, "invalid password") {
		return ""
	}
	if p.o.MasterName != "" {
		return " (the sentinels are asked as the sentinel user: --sentinel-user, password from $COORDTORTURE_SENTINEL_PASSWORD; " +
			"the data nodes as --user, password from $COORDTORTURE_PASSWORD)"
	}
	return " (--user, password from $COORDTORTURE_PASSWORD)"
}

func (p *run) checkSentinels(ctx context.Context) {
	reachable, known, quorumOK, quorumDenied, aclAsked := 0, 0, 0, 0, 0
	var errs, deniedReq, deniedOpt []string
	for _, a := range p.o.Addrs {
		so := &redis.Options{Addr: a, Username: p.o.SentinelUsername, Password: p.o.SentinelPassword, DialTimeout: p.o.Timeout,
			ReadTimeout: p.o.Timeout, WriteTimeout: p.o.Timeout, DisableIdentity: true,
			Dialer: tlsopt.WrapDialer(p.o.Dialer, p.o.TLSConfig), TLSConfig: p.o.TLSConfig}
		s := redis.NewSentinelClient(so)
		cctx, cancel := p.ctx(ctx)
		// A refused PING is an answer: the failover client never sends
		// one, and the sentinel user's rule (sentinelGrant) has none.
		if err := s.Ping(cctx).Err(); err != nil && !tlsopt.PingRefused(err) {
			errs = append(errs, a+": "+err.Error())
			cancel()
			s.Close()
			continue
		}
		reachable++
		masterErr := s.GetMasterAddrByName(cctx, p.o.MasterName).Err()
		if masterErr == nil {
			known++
		} else {
			errs = append(errs, a+": master unknown: "+masterErr.Error())
		}
		if err := s.CkQuorum(cctx, p.o.MasterName).Err(); err == nil {
			quorumOK++
		} else if noperm(err) {
			quorumDenied++ // preflight's own check, which the failover client does not need
		} else {
			errs = append(errs, a+": CKQUORUM: "+err.Error())
		}
		// What go-redis's failover client asks a sentinel, as this user:
		// the primary's address, the other sentinels, and the failover
		// announcements (a Pub/Sub subscription, then closed).
		if noperm(masterErr) {
			deniedReq = append(deniedReq, a+": SENTINEL GET-MASTER-ADDR-BY-NAME")
		}
		if err := s.Sentinels(cctx, p.o.MasterName).Err(); noperm(err) {
			deniedOpt = append(deniedOpt, a+": SENTINEL SENTINELS")
		}
		ps := s.Subscribe(cctx, "+switch-master", "+replica-reconf-done")
		if _, err := ps.Receive(cctx); noperm(err) {
			deniedOpt = append(deniedOpt, a+": SUBSCRIBE +switch-master +replica-reconf-done")
		}
		ps.Close()
		aclAsked++
		cancel()
		s.Close()
	}
	p.sentinelACL(aclAsked, deniedReq, deniedOpt)
	n := len(p.o.Addrs)
	desc := fmt.Sprintf("%d/%d sentinels reachable, %d know %q, CKQUORUM OK on %d", reachable, n, known, p.o.MasterName, quorumOK)
	if quorumDenied > 0 {
		desc += fmt.Sprintf(" (not checked on %d: the sentinel user %s may not run SENTINEL CKQUORUM)", quorumDenied, p.r.SentinelUser)
	}
	switch {
	case known == 0 || (quorumOK == 0 && quorumDenied < reachable):
		p.add(Check{Name: "sentinel", Status: Fail, Reason: desc + ": " + strings.Join(errs, "; "), Fix: "fix the sentinels: no failover can be authorized"})
	case reachable < n || known < reachable || quorumOK+quorumDenied < reachable:
		p.add(Check{Name: "sentinel", Status: Warn, Reason: desc + ": " + strings.Join(errs, "; "), Fix: "bring every sentinel back"})
	case quorumDenied > 0:
		p.add(Check{Name: "sentinel", Status: Warn, Reason: desc,
			Fix: "to have the quorum checked, run preflight with a sentinel user that may run SENTINEL CKQUORUM (the failover client does not need it)"})
	case n < 3:
		p.add(Check{Name: "sentinel", Status: Warn, Reason: desc + ": fewer than 3 sentinels", Fix: "run at least 3 sentinels on separate machines"})
	default:
		p.add(Check{Name: "sentinel", Status: OK, Reason: desc})
	}
}

// sentinelACL is the acl/sentinel line: whether the sentinel user (the one
// go-redis's failover client authenticates as with SentinelUsername, not the
// data user) may send the sentinels what that client sends them. Without the
// primary's address it cannot connect (FAIL); without the other sentinels or
// the failover announcements it learns of a failover only when the old
// primary fails it (WARN).
func (p *run) sentinelACL(asked int, denied, deniedOpt []string) {
	if asked == 0 {
		return // no sentinel answered: the sentinel line says so
	}
	grant := "on each sentinel: " + p.sentinelGrant()
	switch {
	case len(denied) > 0:
		p.add(Check{Name: "acl/sentinel", Status: Fail, Reason: fmt.Sprintf("user %q: denied %s", p.r.SentinelUser, strings.Join(append(denied, deniedOpt...), "; ")) +
			": the failover client cannot learn the primary's address", Fix: grant})
	case len(deniedOpt) > 0:
		p.add(Check{Name: "acl/sentinel", Status: Warn, Reason: fmt.Sprintf("user %q: denied %s", p.r.SentinelUser, strings.Join(deniedOpt, "; ")) +
			": the failover client learns of a failover only when the old primary fails it", Fix: grant})
	default:
		p.add(Check{Name: "acl/sentinel", Status: OK, Reason: fmt.Sprintf("user %q may ask %s for the primary, the other sentinels and the failover announcements",
			p.r.SentinelUser, fmt.Sprintf("%d sentinel(s)", asked))})
	}
}

// sentinelGrant is the ACL rule the sentinel user needs on each sentinel.
func (p *run) sentinelGrant() string {
	return "ACL SETUSER " + p.r.SentinelUser + " +sentinel|get-master-addr-by-name +sentinel|sentinels +subscribe &+switch-master &+replica-reconf-done"
}

func (p *run) checkCluster(ctx context.Context) {
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	s, err := p.nodes[0].ClusterInfo(cctx).Result()
	if err != nil {
		p.add(Check{Name: "cluster", Status: Warn, Reason: "CLUSTER INFO refused: " + err.Error(), Fix: "allow CLUSTER INFO for this user"})
		return
	}
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			m[k] = v
		}
	}
	desc := fmt.Sprintf("cluster_state %s, %s/16384 slots assigned, %s ok, %s pfail, %s fail, %s known nodes",
		m["cluster_state"], m["cluster_slots_assigned"], m["cluster_slots_ok"], m["cluster_slots_pfail"], m["cluster_slots_fail"], m["cluster_known_nodes"])
	switch {
	case m["cluster_state"] != "ok" || m["cluster_slots_assigned"] != "16384" || m["cluster_slots_ok"] != "16384":
		p.add(Check{Name: "cluster", Status: Fail, Reason: desc + ": not every slot is served", Fix: "assign and heal every slot (CLUSTER ADDSLOTS, or fix the failed nodes)"})
	default:
		p.add(Check{Name: "cluster", Status: OK, Reason: desc + ": every slot covered"})
	}
}

func (p *run) checkClock(ctx context.Context, n *redis.Client) {
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	name := p.label("clock", n)
	t0 := time.Now()
	st, err := n.Time(cctx).Result()
	t1 := time.Now()
	if err != nil {
		p.add(Check{Name: name, Status: Warn, Reason: "TIME refused: " + err.Error(), Fix: "allow TIME for this user"})
		return
	}
	mid := t0.Add(t1.Sub(t0) / 2)
	off := st.Sub(mid)
	abs := max(off, -off)
	desc := fmt.Sprintf("server clock %+dms from this client's (±%dms)", off.Milliseconds(), (t1.Sub(t0) / 2).Milliseconds())
	if abs > p.o.ClockWarn {
		p.add(Check{Name: name, Status: Warn, Reason: desc + fmt.Sprintf(": above %v; the server decides expiry and rate windows, the client estimates them",
			p.o.ClockWarn), Fix: "synchronize both clocks (NTP/chrony)", Scenario: p.scenarioFor(clockScenarios)})
		return
	}
	p.add(Check{Name: name, Status: OK, Reason: desc})
}

func (p *run) checkLimits(ctx context.Context) {
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	n := p.nodes[0]
	if !p.usesAny(Waiting, Latch) {
		// Only waiting and latch waits track keys.
	} else if v, ok := config(cctx, n, "tracking-table-max-keys"); !ok {
		p.add(Check{Name: "tracking-table-max-keys", Status: Warn, Reason: "could not be read (CONFIG GET refused)", Fix: "check it by hand: 0 or at least 100000"})
	} else if k, _ := strconv.Atoi(v); k != 0 && k < 100000 {
		p.add(Check{Name: "tracking-table-max-keys", Status: Warn, Reason: v + ": a full table evicts tracked keys, waking waiters for nothing (more traffic, no lost wake-up)",
			Fix: "tracking-table-max-keys 1000000 (the default) or 0", Scenario: "waiting-lock/lost-notifications"})
	} else {
		p.add(Check{Name: "tracking-table-max-keys", Status: OK, Reason: v})
	}
	name, v, ok := "busy-reply-threshold", "", false
	if v, ok = config(cctx, n, name); !ok {
		name = "lua-time-limit"
		v, ok = config(cctx, n, name)
	}
	ms, _ := strconv.Atoi(v)
	switch {
	case !ok:
		p.add(Check{Name: "busy-reply-threshold", Status: Warn, Reason: "could not be read (CONFIG GET refused)", Fix: "check busy-reply-threshold (lua-time-limit) by hand: 5000 is the default"})
	case ms <= 0 || ms > 10000:
		p.add(Check{Name: name, Status: Warn, Reason: v + "ms: a runaway script blocks the server that long before BUSY",
			Fix: "busy-reply-threshold 5000 (the default)"})
	default:
		p.add(Check{Name: name, Status: OK, Reason: v + "ms (prim's scripts run in microseconds)"})
	}
}
