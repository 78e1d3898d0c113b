package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/testbed"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// build is the one build the package's tests run on, even on the whole
// matrix (preflight reads configuration; the builds differ in what the
// capability lines say, which the golden files per build cover): the
// default build when the matrix has it, else the matrix's first.
func build() string {
	m := testbed.Matrix()
	if slices.Contains(m, testbed.DefaultBuild) {
		return testbed.DefaultBuild
	}
	return m[0]
}

func find(t *testing.T, r *Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in:\n%s", name, text(r))
	return Check{}
}

func text(r *Report) string {
	var b bytes.Buffer
	_ = r.WriteText(&b)
	return b.String()
}

func guarantee(t *testing.T, r *Report, scenario string) Guarantee {
	t.Helper()
	for _, g := range r.Guarantees {
		if g.Scenario == scenario {
			return g
		}
	}
	t.Fatalf("no guarantee tied to %s:\n%s", scenario, text(r))
	return Guarantee{}
}

// dialer is the testbed's: its proxies take connections from the test's
// source address only.
func dialer(t *testing.T, topo *testbed.Topology) func(context.Context, string, string) (net.Conn, error) {
	t.Helper()
	c, err := topo.NodeClient(topo.Nodes()[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	return c.Options().Dialer
}

func runOK(t *testing.T, o Options) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// state is what a write would change: the keys, DBSIZE, INFO keyspace and
// the count of changes since the last save (every write counts).
func state(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	n, err := c.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ks, err := c.Info(ctx, "keyspace").Result()
	if err != nil {
		t.Fatal(err)
	}
	m, err := info(ctx, c, "persistence")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(keys, ",") + "|" + strings.TrimSpace(ks) + "|" + m["rdb_changes_since_last_save"] + "|" + strconv.FormatInt(n, 10)
}

var (
	reAddr    = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	reVersion = regexp.MustCompile(`(redis|valkey) \d+\.\d+\.\d+`)
	reClock   = regexp.MustCompile(`[+-]\d+ms from this client's \(±\d+ms\)`)
)

func normalize(s string) string {
	s = reAddr.ReplaceAllString(s, "ADDR")
	s = reVersion.ReplaceAllString(s, "$1 VERSION")
	return reClock.ReplaceAllString(s, "Nms from this client's (±Nms)")
}

// TestWellConfigured: AOF with appendfsync always and noeviction on a
// standalone server give no FAIL, the golden human output, and nothing is
// written: the keys, DBSIZE, INFO keyspace and the server's count of
// changes are what they were.
func TestWellConfigured(t *testing.T) {
	b := build()
	topo := testbed.Standalone(t, b, testbed.WithAOF(true))
	admin := topo.Node("n1").Admin()
	ctx := context.Background()
	if err := admin.Set(ctx, "users-own-key", "keep", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.HSet(ctx, "users-hash", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	before := state(t, admin)
	r := runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo)})
	if after := state(t, admin); after != before {
		t.Errorf("preflight wrote: before %q, after %q", before, after)
	}
	out := text(r)
	// The one FAIL a build may have: no hash-field expiry (Redis before
	// 7.4, Valkey before 9), for hash-field leases.
	noHFE := strings.Contains(find(t, r, "capability/hash-field-expiry").Reason, "absent (ERR unknown command")
	for _, c := range r.Checks {
		if c.Status == Fail && (!noHFE || c.Name != "primitive/hash-lease") {
			t.Errorf("a FAIL on a well-configured server: %+v\n%s", c, out)
		}
	}
	if want := map[bool]int{false: 0, true: 1}[noHFE]; r.ExitStatus() != want {
		t.Errorf("exit status %d, want %d", r.ExitStatus(), want)
	}
	if c := find(t, r, "persistence"); c.Status != OK || !strings.Contains(c.Reason, "appendfsync always") {
		t.Errorf("persistence: %+v", c)
	}
	if c := find(t, r, "maxmemory-policy"); c.Status != OK {
		t.Errorf("maxmemory-policy: %+v", c)
	}
	if g := guarantee(t, r, "fenced-lock/kill-restart-noaof"); !g.Holds {
		t.Errorf("restart guarantee: %+v", g)
	}

	var js bytes.Buffer
	var back Report
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Checks) != len(r.Checks) || back.Checks[0].Name != "server" ||
		len(back.Guarantees) != len(r.Guarantees) || !strings.Contains(js.String(), `"status": "OK"`) {
		t.Errorf("JSON does not round-trip: %v\n%s", err, js.String())
	}

	golden := filepath.Join("testdata", "standalone-"+b+".golden")
	got := normalize(out)
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestWellConfigured -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("human output differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

// TestMisconfigured: on one server, an evicting policy is a FAIL naming
// fenced-lock/eviction (a WARN when the service uses no fenced lock), no
// persistence a WARN naming fenced-lock/kill-restart-noaof, a user without
// CLIENT KILL a FAIL naming it, and a user that may not run ACL DRYRUN a
// WARN saying the ACL could not be checked.
func TestMisconfigured(t *testing.T) {
	topo := testbed.Standalone(t, build(), testbed.WithConfig("maxmemory 256mb", "maxmemory-policy allkeys-lru"))
	addr := topo.Node("n1").Addr
	dial := dialer(t, topo)
	admin := topo.Node("n1").Admin()
	ctx := context.Background()

	r := runOK(t, Options{Addrs: []string{addr}, Dialer: dial})
	c := find(t, r, "maxmemory-policy")
	if c.Status != Fail || c.Scenario != "fenced-lock/eviction" || !strings.Contains(c.Reason, "allkeys-lru") {
		t.Errorf("evicting policy: %+v", c)
	}
	if !strings.Contains(text(r), "see coordtorture run fenced-lock/eviction") || r.ExitStatus() != 1 {
		t.Errorf("the scenario is not named, or exit status %d:\n%s", r.ExitStatus(), text(r))
	}
	if g := guarantee(t, r, "fenced-lock/eviction"); g.Holds {
		t.Errorf("eviction guarantee holds: %+v", g)
	}
	c = find(t, r, "persistence")
	if c.Status != Warn || c.Scenario != "fenced-lock/kill-restart-noaof" {
		t.Errorf("no persistence: %+v", c)
	}
	if g := guarantee(t, r, "fenced-lock/kill-restart-noaof"); g.Holds {
		t.Errorf("restart guarantee holds without persistence: %+v", g)
	}

	// Without fenced locks, eviction is a WARN.
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Primitives: []string{RateLimiters, Semaphore}})
	if c := find(t, r, "maxmemory-policy"); c.Status != Warn {
		t.Errorf("evicting policy without fenced locks: %+v", c)
	}
	if r.Failed() {
		t.Errorf("a FAIL:\n%s", text(r))
	}

	// A user without CLIENT KILL (but with ACL DRYRUN).
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-client|kill").Err(); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "app", Password: "pw", Primitives: []string{FencedLock, RateLimiters}})
	c = find(t, r, "acl/fenced-lock")
	if c.Status != Fail || !strings.Contains(c.Reason, "CLIENT KILL") || !strings.Contains(c.Fix, "+client|kill") {
		t.Errorf("user without CLIENT KILL: %+v", c)
	}
	if c := find(t, r, "acl/rate-limiters"); c.Status != OK {
		t.Errorf("rate limiters need no CLIENT KILL: %+v", c)
	}
	if g := guarantee(t, r, "fenced-lock/lose-replies"); g.Holds {
		t.Errorf("fencing guarantee holds without CLIENT KILL: %+v", g)
	}
	// A user without the invalidation channel: waiting polls (WARN).
	if err := admin.Do(ctx, "ACL", "SETUSER", "nochan", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "nochan", Password: "pw", Primitives: []string{Waiting}})
	if c := find(t, r, "acl/waiting"); c.Status != Warn || !strings.Contains(c.Reason, "SUBSCRIBE") || !strings.Contains(c.Reason, "polling") {
		t.Errorf("user without the invalidation channel: %+v", c)
	}
	// A user without PING: the watcher's keep-alive uses CLIENT ID instead,
	// so waiting does not poll (WARN, and the guarantee holds).
	if err := admin.Do(ctx, "ACL", "SETUSER", "noping", "on", ">pw", "~*", "&*", "+@all", "-ping").Err(); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "noping", Password: "pw", Primitives: []string{Waiting}})
	if c := find(t, r, "acl/waiting"); c.Status != Warn || !strings.Contains(c.Reason, "PING") || strings.Contains(c.Reason, "polling") ||
		!strings.Contains(c.Reason, "CLIENT ID instead") {
		t.Errorf("user without PING: %+v", c)
	}
	if g := guarantee(t, r, "waiting-lock/lost-notifications"); !g.Holds {
		t.Errorf("user without PING: waiting counted as polling: %+v", g)
	}
	// A user that may read neither INFO nor CONFIG: WARNs saying what could
	// not be read, not a wrong OK.
	if err := admin.Do(ctx, "ACL", "SETUSER", "blind", "on", ">pw", "~*", "&*", "+@all", "-info", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "blind", Password: "pw"})
	for _, name := range []string{"server", "maxmemory-policy", "persistence", "replication", "tracking-table-max-keys", "busy-reply-threshold"} {
		if c := find(t, r, name); c.Status != Warn {
			t.Errorf("%s without INFO and CONFIG: %+v", name, c)
		}
	}
	for _, sc := range []string{"fenced-lock/eviction", "fenced-lock/kill-restart-noaof", "fenced-lock/failover-forced"} {
		if g := guarantee(t, r, sc); g.Holds || !g.Unchecked {
			t.Errorf("a guarantee decided without its facts: %+v", g)
		}
	}
	// A user that may not run ACL DRYRUN (as a service's own user usually
	// may not): each command is queued in a discarded MULTI instead, which
	// the server checks against the user's ACL, keys and channels included.
	for _, u := range []struct {
		name   string
		rules  []any
		status Status
		want   string
	}{
		{"noacl", []any{"~*", "&*", "+@all", "-acl"}, OK, "every command allowed"},
		{"noacl-nokill", []any{"~*", "&*", "+@all", "-acl", "-client|kill"}, Fail, "CLIENT KILL"},
		{"noacl-otherkeys", []any{"~other*", "&*", "+@all", "-acl"}, Fail, "denied EVALSHA, EVAL"},
	} {
		args := append([]any{"ACL", "SETUSER", u.name, "on", ">pw"}, u.rules...)
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: u.name, Password: "pw", Primitives: []string{FencedLock}})
		c := find(t, r, "acl/fenced-lock")
		if c.Status != u.status || !strings.Contains(c.Reason, u.want) || !strings.Contains(c.Reason, "discarded MULTI") {
			t.Errorf("%s (checked in MULTI): %+v, want %s with %q", u.name, c, u.status, u.want)
		}
		if g := guarantee(t, r, "fenced-lock/lose-replies"); g.Unchecked || g.Holds == strings.Contains(u.want, "CLIENT KILL") {
			t.Errorf("%s: fencing guarantee %+v", u.name, g)
		}
	}
	if n := admin.DBSize(ctx).Val(); n != 0 {
		t.Errorf("the queued checks left %d keys", n)
	}
	// Several keys, one per key pattern of the user's: each is checked, and
	// a denial for some of them names them.
	if err := admin.Do(ctx, "ACL", "SETUSER", "patterns", "on", ">pw", "~orders:*", "~users:*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "patterns", Password: "pw", Primitives: []string{FencedLock},
		Keys: []string{"orders:1", "users:1"}})
	if c := find(t, r, "acl/fenced-lock"); c.Status != OK || !strings.Contains(c.Reason, "orders:1 (counter orders:1:fence), users:1") {
		t.Errorf("user with both key patterns: %+v", c)
	} else {
		t.Logf("both: %+v", c)
	}
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "patterns", Password: "pw", Primitives: []string{FencedLock},
		Keys: []string{"orders:1", "billing:1"}})
	if c := find(t, r, "acl/fenced-lock"); c.Status != Fail || !strings.Contains(c.Reason, "denied (for billing:1) EVALSHA, EVAL") ||
		!strings.Contains(c.Fix, "key patterns") || strings.Contains(c.Fix, "+evalsha") {
		t.Errorf("a key outside the user's patterns: %+v", c)
	}
	// prim's documented pair {name}:lease / {name}:fence: the counter
	// checked beside {inv:1}:lease is {inv:1}:fence, which the user's
	// patterns allow; a user whose name holds "key" is told to grant the
	// command it lacks, not key patterns (denials carry the user's name).
	for _, u := range []struct {
		name  string
		rules []any
		keys  []string
		want  Status
		fix   string
	}{
		{"inv", []any{"~{inv:*}:lease", "~{inv:*}:fence", "&*", "+@all"}, []string{"{inv:1}:lease"}, OK, ""},
		{"monkey", []any{"~*", "&*", "+@all", "-client|kill"}, nil, Fail, "grant +client|kill"},
		{"monkey-nodry", []any{"~*", "&*", "+@all", "-client|kill", "-acl"}, nil, Fail, "grant +client|kill"},
	} {
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", u.name, "on", ">pw"}, u.rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
		r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: u.name, Password: "pw", Primitives: []string{FencedLock}, Keys: u.keys})
		if c := find(t, r, "acl/fenced-lock"); c.Status != u.want || c.Fix != u.fix {
			t.Errorf("%s: %+v, want %s with fix %q", u.name, c, u.want, u.fix)
		}
	}
	// Neither DRYRUN nor MULTI: the ACL is not checked, and says so.
	if err := admin.Do(ctx, "ACL", "SETUSER", "nomulti", "on", ">pw", "~*", "&*", "+@all", "-acl", "-multi").Err(); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "nomulti", Password: "pw", Primitives: []string{FencedLock}})
	if c := find(t, r, "acl/fenced-lock"); c.Status != Warn || !strings.Contains(c.Reason, "not checked") {
		t.Errorf("user without ACL DRYRUN or MULTI: %+v", c)
	}
	if g := guarantee(t, r, "fenced-lock/lose-replies"); g.Holds || !g.Unchecked {
		t.Errorf("fencing guarantee without ACL DRYRUN or MULTI: %+v", g)
	}
}

// TestSentinel: through the sentinels, the replication line counts the
// replica, the Sentinel line the quorum, and the failover guarantee is at
// risk with its scenario.
func TestSentinel(t *testing.T) {
	topo := testbed.Replicated(t, build(), 1, 3)
	var addrs []string
	for _, s := range topo.Sentinels() {
		addrs = append(addrs, s.Addr)
	}
	r := runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo)})
	if r.Topology != "sentinel" {
		t.Errorf("topology %q", r.Topology)
	}
	// A sentinel down, first in the list: the deployment is still checked
	// (the transport probe tries the next address), and the line says so.
	down := runOK(t, Options{Addrs: append([]string{"127.0.0.1:1"}, addrs...), MasterName: testbed.MasterName, Dialer: dialer(t, topo)})
	if c := find(t, down, "sentinel"); c.Status != Warn || !strings.Contains(c.Reason, fmt.Sprintf("%d/%d sentinels reachable", len(addrs), len(addrs)+1)) {
		t.Errorf("a sentinel down: %+v", c)
	}
	c := find(t, r, "replication")
	if c.Status != Warn || !strings.Contains(c.Reason, "1 replica(s)") || !strings.Contains(c.Reason, "min-replicas-to-write 0") ||
		c.Scenario != "fenced-lock/failover-forced" {
		t.Errorf("replication: %+v", c)
	}
	if c := find(t, r, "sentinel"); c.Status != OK || !strings.Contains(c.Reason, "3/3 sentinels reachable") || !strings.Contains(c.Reason, "CKQUORUM OK on 3") {
		t.Errorf("sentinel: %+v", c)
	}
	if g := guarantee(t, r, "fenced-lock/failover-forced"); g.Holds {
		t.Errorf("failover guarantee holds with asynchronous replication: %+v", g)
	}
	if c := find(t, r, "acl/sentinel"); c.Status != OK || !strings.Contains(c.Reason, "3 sentinel(s)") {
		t.Errorf("acl/sentinel for the default user: %+v", c)
	}
	// The sentinels keep their own ACL, and the sentinel user is asked as
	// go-redis's failover client asks: a user without the failover
	// announcements' channels is a WARN; without the primary's address the
	// client (preflight's own too) cannot connect: an error that names the
	// rule to add.
	ctx := context.Background()
	for _, u := range []struct {
		rules  []any
		status Status
		want   string
	}{
		{[]any{"resetchannels", "+@all"}, Warn, "SUBSCRIBE +switch-master"},
		{[]any{"allchannels", "+@all", "-sentinel|get-master-addr-by-name"}, Fail, "ACL SETUSER svc +sentinel|get-master-addr-by-name"},
	} {
		for _, n := range topo.Sentinels() {
			if err := n.Admin().Do(ctx, append([]any{"ACL", "SETUSER", "svc", "reset", "on", ">pw", "~*"}, u.rules...)...).Err(); err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
		}
		for _, n := range topo.Nodes() { // the data nodes: everything
			if err := n.Admin().Do(ctx, "ACL", "SETUSER", "svc", "reset", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
		}
		o := Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo), Username: "svc", Password: "pw",
			SentinelUsername: "svc", SentinelPassword: "pw"}
		if u.status == Fail {
			_, err := Run(ctx, o)
			if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), u.want) {
				t.Errorf("sentinels with %v: %v, want ErrConnect naming %s", u.rules, err, u.want)
			}
			continue
		}
		r := runOK(t, o)
		if c := find(t, r, "acl/sentinel"); c.Status != u.status || !strings.Contains(c.Reason, u.want) {
			t.Errorf("sentinels with %v: %+v, want %s naming %s", u.rules, c, u.status, u.want)
		}
	}
	// min-replicas-to-write 1 narrows the window: OK, and still at risk.
	primary, err := topo.Primary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.Admin().ConfigSet(context.Background(), "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo)})
	if c := find(t, r, "replication"); c.Status != OK || !strings.Contains(c.Reason, "min-replicas-to-write 1") {
		t.Errorf("replication with min-replicas-to-write 1: %+v", c)
	}
	if g := guarantee(t, r, "fenced-lock/failover-forced"); g.Holds {
		t.Errorf("failover guarantee holds with asynchronous replication: %+v", g)
	}
	// The replica detached: the primary has none to fail over to (WARN).
	for _, n := range topo.Nodes() {
		if n.Name != primary.Name {
			if err := n.Admin().Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	r = runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo)})
	if c := find(t, r, "replication"); c.Status != Warn || !strings.Contains(c.Reason, "no connected replica") {
		t.Errorf("replication without a replica: %+v", c)
	}
	if g := guarantee(t, r, "fenced-lock/failover-forced"); !g.Holds {
		t.Errorf("failover guarantee without a replica to promote: %+v", g)
	}
	// An unknown master name: the deployment cannot be reached.
	_, err = Run(context.Background(), Options{Addrs: addrs, MasterName: "nosuchmaster", Timeout: time.Second, Dialer: dialer(t, topo)})
	if !errors.Is(err, ErrConnect) {
		t.Errorf("unknown master: %v", err)
	}
}

// TestCluster: every slot covered is OK; a slot no node serves is a FAIL.
func TestCluster(t *testing.T) {
	topo := testbed.Cluster(t, build(), 3, 0)
	var addrs []string
	for _, n := range topo.Nodes() {
		addrs = append(addrs, n.Addr)
	}
	r := runOK(t, Options{Addrs: addrs, Dialer: dialer(t, topo)})
	if c := find(t, r, "cluster"); c.Status != OK || !strings.Contains(c.Reason, "16384/16384") {
		t.Errorf("cluster: %+v\n%s", c, text(r))
	}
	if len(r.Checks) == 0 || find(t, r, "server").Status != OK || !strings.Contains(find(t, r, "server").Reason, "3 primaries") {
		t.Errorf("server:\n%s", text(r))
	}
	// The write probe on a cluster: every primitive, no key left.
	r = runOK(t, Options{Addrs: addrs, Dialer: dialer(t, topo), WriteProbe: true})
	checkWriteProbe(t, r)
	for _, n := range topo.Nodes() {
		if k, err := n.Admin().Keys(context.Background(), "*").Result(); err != nil || len(k) > 0 {
			t.Errorf("%s: keys left: %v %v", n.Name, k, err)
		}
	}
	ctx := context.Background()
	// A user without CLUSTER SLOTS (and PING): the cluster client's PING
	// asks CLUSTER SLOTS first, and without it every command fails: the
	// deployment is not reached (a refused PING alone would be an answer).
	for _, n := range topo.Nodes() {
		if err := n.Admin().Do(ctx, "ACL", "SETUSER", "noslots", "on", ">pw", "~*", "&*", "+@all", "-cluster|slots", "-ping").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Run(ctx, Options{Addrs: addrs, Dialer: dialer(t, topo), Username: "noslots", Password: "pw", Timeout: time.Second}); !errors.Is(err, ErrConnect) ||
		!strings.Contains(err.Error(), "cluster|slots") {
		t.Errorf("a cluster user without CLUSTER SLOTS: %v, want ErrConnect naming cluster|slots", err)
	}
	// Each node keeps its own ACL: a user without CLIENT KILL on one node
	// only is a FAIL naming that node, checked on every primary, by DRYRUN
	// and by queueing in MULTI (a user that may not run ACL DRYRUN).
	for _, u := range []struct{ name, how string }{{"app", "every command"}, {"svc", "discarded MULTI"}} {
		for i, n := range topo.Nodes() {
			rules := []any{"ACL", "SETUSER", u.name, "on", ">pw", "~*", "&*", "+@all"}
			if u.name == "svc" {
				rules = append(rules, "-acl")
			}
			if i == 1 {
				rules = append(rules, "-client|kill")
			}
			if err := n.Admin().Do(ctx, rules...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		r = runOK(t, Options{Addrs: addrs, Dialer: dialer(t, topo), Username: u.name, Password: "pw", Primitives: []string{FencedLock, RateLimiters}})
		c := find(t, r, "acl/fenced-lock")
		if want := "CLIENT KILL (on " + topo.Nodes()[1].Addr + ")"; c.Status != Fail || !strings.Contains(c.Reason, want) {
			t.Errorf("%s without CLIENT KILL on one node: %+v, want FAIL naming %q", u.name, c, want)
		}
		if c := find(t, r, "acl/rate-limiters"); c.Status != OK || u.name == "svc" && !strings.Contains(c.Reason, u.how) {
			t.Errorf("%s: rate limiters on every node: %+v", u.name, c)
		}
	}
	// A node whose ACL refuses MULTI (the others allow it) would run the
	// queued commands at once: they are never sent there, the check says it
	// could not run, and a live lock on that node's slot is untouched.
	n2 := topo.Nodes()[1].Admin()
	live := ""
	for i := 0; live == "" && i < 1000; i++ {
		k := fmt.Sprintf("svc:%d", i)
		if n2.Set(ctx, k, "live-lock-token", 10*time.Minute).Err() == nil {
			live = k // n2 serves its slot
		}
	}
	if live == "" {
		t.Fatal("no key of the second node's slots found")
	}
	for i, n := range topo.Nodes() {
		rules := []any{"ACL", "SETUSER", "svc2", "on", ">pw", "~*", "&*", "+@all", "-acl"}
		if i == 1 {
			rules = append(rules, "-multi")
		}
		if err := n.Admin().Do(ctx, rules...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r = runOK(t, Options{Addrs: addrs, Dialer: dialer(t, topo), Username: "svc2", Password: "pw", Primitives: []string{FencedLock}, Keys: []string{live}})
	if c := find(t, r, "acl/fenced-lock"); c.Status != Warn || !strings.Contains(c.Reason, "cannot be queued") ||
		!strings.Contains(c.Reason, topo.Nodes()[1].Addr) {
		t.Errorf("a node refusing MULTI: %+v", c)
	}
	if v, err := n2.Get(ctx, live).Result(); v != "live-lock-token" || err != nil {
		t.Fatalf("the live lock on the node refusing MULTI is %q, %v: the check ran commands", v, err)
	}
	if g := guarantee(t, r, "fenced-lock/lose-replies"); !g.Unchecked {
		t.Errorf("fencing guarantee with the ACL unchecked on a node: %+v", g)
	}
	// Forget slot 0 everywhere: uncovered.
	for _, n := range topo.Nodes() {
		_ = n.Admin().Do(ctx, "CLUSTER", "DELSLOTS", 0).Err()
	}
	r = runOK(t, Options{Addrs: addrs, Dialer: dialer(t, topo)})
	if c := find(t, r, "cluster"); c.Status != Fail || !strings.Contains(c.Reason, "16383/16384") {
		t.Errorf("uncovered slot: %+v", c)
	}
}

// TestWriteProbe: --write-probe runs every primitive (hash-field leases
// where the server has them) and leaves no key: only the user's keys remain.
func TestWriteProbe(t *testing.T) {
	topo := testbed.Standalone(t, build(), testbed.WithAOF(true))
	admin := topo.Node("n1").Admin()
	if err := admin.Set(context.Background(), "users-own-key", "keep", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo), WriteProbe: true})
	checkWriteProbe(t, r)
	keys, err := admin.Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 1 || keys[0] != "users-own-key" {
		t.Errorf("keys left: %v %v", keys, err)
	}
}

func checkWriteProbe(t *testing.T, r *Report) {
	t.Helper()
	noHFE := strings.Contains(find(t, r, "capability/hash-field-expiry").Reason, "absent")
	for _, prim := range append(slices.DeleteFunc(Primitives(), func(p string) bool { return p == Redlock }), "cleanup") {
		c := find(t, r, "write-probe/"+prim)
		want := OK
		if prim == HashLease && noHFE {
			want = Warn
		}
		if c.Status != want {
			t.Errorf("%s: %+v", prim, c)
		}
	}
}

// TestOldServer: Redis 7.0 has no hash-field expiry: the capability is
// absent (learned from "unknown command") and hash-field leases FAIL.
func TestOldServer(t *testing.T) {
	if !slices.Contains(testbed.Matrix(), "redis-7.0") {
		t.Skip("redis-7.0 is not in the matrix (COORDTORTURE_SERVERS)")
	}
	topo := testbed.Standalone(t, "redis-7.0", testbed.WithAOF(true))
	r := runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo)})
	if c := find(t, r, "capability/hash-field-expiry"); !strings.Contains(c.Reason, "absent (ERR unknown command") {
		t.Errorf("hash-field expiry: %+v", c)
	}
	if c := find(t, r, "primitive/hash-lease"); c.Status != Fail || !strings.Contains(c.Reason, "hash-field expiry missing") {
		t.Errorf("hash-lease: %+v", c)
	}
	if c := find(t, r, "primitive/fenced-lock"); c.Status != OK {
		t.Errorf("fenced-lock: %+v", c)
	}
	r = runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo), Primitives: []string{FencedLock, Semaphore}})
	if r.Failed() {
		t.Errorf("a FAIL without hash-field leases:\n%s", text(r))
	}
}

// TestBadOptions: usage errors and an unreachable deployment are typed.
func TestBadOptions(t *testing.T) {
	ctx := context.Background()
	for _, o := range []Options{{}, {Addrs: []string{"127.0.0.1:1"}, Primitives: []string{"mutex"}},
		{Addrs: []string{"127.0.0.1:1"}, MasterName: "m", Cluster: true},
		// go-redis authenticates only with a password: a sentinel user
		// without one would silently be the sentinels' default user.
		{Addrs: []string{"127.0.0.1:1"}, MasterName: "m", SentinelUsername: "s"}} {
		if _, err := Run(ctx, o); !errors.Is(err, ErrUsage) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := Run(ctx, Options{Addrs: []string{"127.0.0.1:1"}, Timeout: 500 * time.Millisecond}); !errors.Is(err, ErrConnect) {
		t.Errorf("unreachable: %v", err)
	}
}
