package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind names a topology shape.
type Kind string

// The topology shapes.
const (
	KindStandalone  Kind = "standalone"  // one server
	KindReplicated  Kind = "replicated"  // one primary, N replicas, optional sentinels
	KindCluster     Kind = "cluster"     // Redis Cluster
	KindIndependent Kind = "independent" // N unrelated servers (Redlock)
)

// MasterName is the name sentinels monitor the primary under.
const MasterName = "coordtorture"

// Option configures a topology.
type Option func(*config)

type config struct {
	startTimeout  time.Duration
	aof           bool
	replTimeout   time.Duration
	nodeTimeout   time.Duration
	downAfter     time.Duration
	failoverTO    time.Duration
	extra         []string
	logf          func(string, ...any)
	adminTimeout  time.Duration
	clientTimeout time.Duration
	nodeBuilds    map[string]string   // node name -> build (WithNodeBuild)
	nodeConfig    map[string][]string // node name -> configuration lines (WithNodeConfig)
	containers    Containers          // WithContainers
	tls           bool                // WithTLS
}

func defaults() config {
	return config{
		startTimeout:  30 * time.Second,
		replTimeout:   3 * time.Second,
		nodeTimeout:   2 * time.Second,
		downAfter:     time.Second,
		failoverTO:    3 * time.Second,
		logf:          func(string, ...any) {},
		adminTimeout:  2 * time.Second,
		clientTimeout: 3 * time.Second,
	}
}

// WithStartTimeout bounds how long a topology may take to become ready (default 30s).
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.startTimeout = d } }

// WithAOF starts data nodes with `appendonly yes` and `appendfsync always`, so a
// kill -9 and restart keeps every acknowledged write. Default: no persistence at
// all, so a restart comes back empty.
func WithAOF(on bool) Option { return func(c *config) { c.aof = on } }

// WithReplTimeout sets repl-timeout (default 3s): how soon a replica behind a silent
// partition reports master_link_status:down.
func WithReplTimeout(d time.Duration) Option { return func(c *config) { c.replTimeout = d } }

// WithClusterNodeTimeout sets cluster-node-timeout (default 2s).
func WithClusterNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithDownAfter sets the sentinels' down-after-milliseconds (default 1s).
func WithDownAfter(d time.Duration) Option { return func(c *config) { c.downAfter = d } }

// WithConfig adds raw configuration lines to every data node ("maxmemory 10mb").
func WithConfig(lines ...string) Option {
	return func(c *config) { c.extra = append(c.extra, lines...) }
}

// WithLogf receives progress lines (testing.T.Logf fits).
func WithLogf(f func(string, ...any)) Option { return func(c *config) { c.logf = f } }

// WithClientTimeout sets dial/read/write timeouts of clients made by Client (default 3s).
func WithClientTimeout(d time.Duration) Option { return func(c *config) { c.clientTimeout = d } }

// ErrIncompatibleReplica is returned when a replica cannot load its primary's
// snapshot: its log says "Can't handle RDB format version", as an older server's
// does when it replicates from a newer one (WithNodeBuild).
var ErrIncompatibleReplica = errors.New("testbed: a replica cannot load its primary's snapshot")

// rdbTooNew is what a server logs when a snapshot is newer than it can read.
const rdbTooNew = "Can't handle RDB format version"

// ErrBadOption is returned, before any server starts, for an option the
// topology cannot honour: WithNodeBuild outside a replicated topology, or naming
// a node the topology does not have.
var ErrBadOption = errors.New("testbed: bad topology option")

// WithNodeBuild runs one node of a replicated topology (NewReplicated) on
// another server build than the topology's: node is a data node's name (n1,
// the first primary; n2… the replicas) or a sentinel's (s1…), build a matrix
// name. Given several times, one node each; the last for a node wins. It makes
// mixed-version topologies, such as an older primary with a newer replica that
// a failover promotes (Node.Build tells each node's build). Replication works
// from older to newer only: a replica cannot load a newer server's snapshot
// (redis-8.0 and valkey-9.1 replicas of a redis-8.6 primary log "Can't handle
// RDB format version 13" and never come up), and NewReplicated then fails
// with ErrIncompatibleReplica, quoting that line. An unknown build is ErrUnknownBuild (or
// ErrBuildMissing), another kind of topology or an unknown node ErrBadOption,
// before any server starts.
func WithNodeBuild(node, build string) Option {
	return func(c *config) {
		if c.nodeBuilds == nil {
			c.nodeBuilds = map[string]string{}
		}
		c.nodeBuilds[node] = build
	}
}

// WithNodeConfig adds raw configuration lines to one data node of a replicated
// topology (NewReplicated), after WithConfig's: node is n1 (the first primary)
// or a replica's name (n2…). For example `rename-command DELEX ""` makes a
// redis-8.6 node answer DELEX exactly as a server without it does ("ERR unknown
// command 'DELEX', …"), so a failover can land on a node of the same build that
// lacks a command, which WithNodeBuild cannot set up for newer builds. Given
// several times, the lines add up. Another kind of topology, a sentinel or an
// unknown node is ErrBadOption, before any server starts.
func WithNodeConfig(node string, lines ...string) Option {
	return func(c *config) {
		if c.nodeConfig == nil {
			c.nodeConfig = map[string][]string{}
		}
		c.nodeConfig[node] = append(c.nodeConfig[node], lines...)
	}
}

// Topology is a set of running servers, every link of which goes through its own
// proxy. It is safe for concurrent use. Close stops everything it started.
type Topology struct {
	Kind Kind
	// Build is the build of every node WithNodeBuild does not name.
	Build *Build

	cfg        config
	nodeBuilds map[string]*Build // WithNodeBuild's, resolved
	dir        string
	sb         *switchboard
	ctr        ContainerNetwork // the servers' container network (WithContainers); nil for local processes
	announce   string           // the host servers announce: 127.0.0.1, or the container network's gateway
	tls        *tlsState        // WithTLS's CA and client configuration; nil without
	nodes      []*Node
	sentinels  []*Node

	mu      sync.Mutex
	aux     []*Node // AddStandalone's servers
	clients []interface{ Close() error }
	peers   map[string]string // client peer name -> source IP
	closed  bool
}

// Node is one server process of a topology: a data node or a sentinel.
type Node struct {
	// Name is the peer name: n1, n2… for data nodes, s1, s2, s3 for sentinels.
	Name     string
	Sentinel bool
	// Aux marks a server beside the system under test (AddStandalone): a
	// standalone server whatever the topology's kind, not among Nodes.
	Aux bool
	// Addr is the announced (proxied) client address: what clients, replicas and
	// sentinels connect to.
	Addr string
	// BusAddr is the announced cluster-bus address (cluster only).
	BusAddr string
	// Build is the server build the node runs: the topology's, or the one
	// WithNodeBuild named for it.
	Build *Build

	topo  *Topology
	ip    string
	dir   string
	proc  server // a local process, or a container (WithContainers)
	admin *redis.Client

	mu          sync.Mutex
	replicaOf   *Node // the primary this node replicates at its next start
	clockOffset time.Duration
	aof         bool
	paused      bool
}

func (t *Topology) newNode(name string, sentinel bool) (*Node, error) {
	return t.makeNode(name, sentinel, false)
}

func (t *Topology) makeNode(name string, sentinel, aux bool) (*Node, error) {
	n := &Node{Name: name, Sentinel: sentinel, Aux: aux, topo: t, aof: t.cfg.aof && !sentinel, Build: t.Build}
	if t.ctr != nil {
		n.ip = t.ctr.AllocIP()
	} else {
		n.ip = allocIP()
	}
	if b := t.nodeBuilds[name]; b != nil && !aux {
		n.Build = b
	}
	n.dir = filepath.Join(t.dir, name)
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, err
	}
	if err := n.issueCert(); err != nil {
		return nil, err
	}
	t.sb.addPeer(name, n.ip)
	real := net.JoinHostPort(n.ip, strconv.Itoa(serverPort))
	var err error
	if n.Addr, err = t.sb.expose(name, name, real); err != nil {
		return nil, err
	}
	if t.Kind == KindCluster && !aux {
		if n.BusAddr, err = t.sb.expose(name+".bus", name, net.JoinHostPort(n.ip, strconv.Itoa(serverPort+10000))); err != nil {
			return nil, err
		}
	}
	n.admin = redis.NewClient(&redis.Options{
		Addr: real, Protocol: 2, MaxRetries: -1, PoolSize: 4,
		DialTimeout: t.cfg.adminTimeout, ReadTimeout: t.cfg.adminTimeout, WriteTimeout: t.cfg.adminTimeout,
		DisableIdentity: true, TLSConfig: t.TLSConfig(),
	})
	label := fmt.Sprintf("%s %s (%s)", n.Build.Name, name, n.ip)
	if t.ctr != nil {
		n.proc = &ctrServer{ContainerServer: t.ctr.Server(name, n.ip, label+" in "+t.ctr.Image())}
	} else {
		n.proc = &process{name: label, dir: n.dir, logPath: filepath.Join(n.dir, "server.log")}
	}
	switch {
	case aux:
		t.mu.Lock()
		t.aux = append(t.aux, n)
		t.mu.Unlock()
	case sentinel:
		t.sentinels = append(t.sentinels, n)
	default:
		t.nodes = append(t.nodes, n)
	}
	return n, nil
}

func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

func (n *Node) conf() string {
	t := n.topo
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("bind %s", n.ip)
	w("bind-source-addr %s", n.ip)
	if tc := n.tlsConf(); tc != "" {
		b.WriteString(tc)
	} else {
		w("port %d", serverPort)
	}
	w("protected-mode no")
	w("daemonize no")
	if p, ok := n.proc.(*process); ok {
		w("dir %s", n.dir)
		w("logfile %s", p.logPath)
	} else {
		w("dir /data")  // the node's volume
		w(`logfile ""`) // the container's output
	}
	if n.Sentinel {
		w("sentinel announce-ip %s", t.announce)
		w("sentinel announce-port %s", port(n.Addr))
		w("sentinel monitor %s %s %s %d", MasterName, t.announce, port(t.nodes[0].Addr), len(t.sentinels)/2+1)
		w("sentinel down-after-milliseconds %s %d", MasterName, t.cfg.downAfter.Milliseconds())
		w("sentinel failover-timeout %s %d", MasterName, t.cfg.failoverTO.Milliseconds())
		w("sentinel parallel-syncs %s 1", MasterName)
		return b.String()
	}
	w(`save ""`)
	if n.aof {
		w("appendonly yes")
		w("appendfsync always")
	} else {
		w("appendonly no")
	}
	w("enable-debug-command yes")
	w("repl-timeout %d", max(1, int(t.cfg.replTimeout.Seconds())))
	w("repl-ping-replica-period 1")
	w("repl-diskless-sync-delay 0")
	w("replica-announce-ip %s", t.announce)
	w("replica-announce-port %s", port(n.Addr))
	if n.replicaOf != nil && t.Kind != KindCluster { // cluster nodes keep roles in nodes.conf
		w("replicaof %s %s", t.announce, port(n.replicaOf.Addr))
	}
	if n.Aux {
		return b.String() // standalone, without the topology's extra lines
	}
	if t.Kind == KindCluster {
		w("cluster-enabled yes")
		w("cluster-config-file nodes.conf")
		w("cluster-node-timeout %d", t.cfg.nodeTimeout.Milliseconds())
		w("cluster-announce-ip %s", t.announce)
		w("cluster-announce-port %s", port(n.Addr))
		if t.tls != nil {
			w("cluster-announce-tls-port %s", port(n.Addr)) // what CLUSTER SLOTS tells clients with tls-cluster
		}
		w("cluster-announce-bus-port %s", port(n.BusAddr))
		w("cluster-port %d", serverPort+10000)
	}
	for _, l := range t.cfg.extra {
		w("%s", l)
	}
	for _, l := range t.cfg.nodeConfig[n.Name] {
		w("%s", l)
	}
	return b.String()
}

// start writes the node's configuration (sentinels keep theirs: they rewrite it
// themselves) and starts the process, waiting for PING.
func (n *Node) start(ctx context.Context) error {
	if c, ok := n.proc.(*ctrServer); ok {
		n.mu.Lock()
		offset := n.clockOffset
		c.conf = []byte(n.conf())
		n.mu.Unlock()
		if offset != 0 {
			return fmt.Errorf("%w: a clock offset (%s)", ErrNotInContainers, n.Name)
		}
		c.keep = n.Sentinel
		c.argv = []string{n.Build.Flavor + "-server", "/data/server.conf"}
		if n.Sentinel {
			c.argv = append(c.argv, "--sentinel")
		}
		if err := c.start(); err != nil {
			return err
		}
		return n.waitStarted(ctx)
	}
	confPath := filepath.Join(n.dir, "server.conf")
	n.mu.Lock()
	offset := n.clockOffset
	_, statErr := os.Stat(confPath)
	if !n.Sentinel || statErr != nil {
		if err := os.WriteFile(confPath, []byte(n.conf()), 0o644); err != nil {
			n.mu.Unlock()
			return err
		}
	}
	n.mu.Unlock()
	args := []string{confPath}
	if n.Sentinel {
		args = append(args, "--sentinel")
	}
	p := n.proc.(*process)
	p.argv, p.env = n.Build.command(args...), nil
	if offset != 0 {
		lib, err := clockSkewLib()
		if err != nil {
			return err
		}
		p.argv, p.env = n.Build.commandWithPreload(lib, args...)
		p.env = append(p.env, fmt.Sprintf("COORDTORTURE_CLOCK_OFFSET_MS=%d", offset.Milliseconds()))
	}
	if err := p.start(); err != nil {
		return err
	}
	return n.waitStarted(ctx)
}

// waitStarted waits until the started server answers PING.
func (n *Node) waitStarted(ctx context.Context) error {
	err := waitFor(ctx, n.topo.cfg.startTimeout, n.Name+" to answer PING", func(ctx context.Context) (bool, error) {
		if done, exitErr := n.proc.exited(); done {
			return false, &exitedError{exitErr}
		}
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := n.admin.Ping(c).Err()
		if err != nil && strings.Contains(err.Error(), "LOADING") {
			return false, err
		}
		return err == nil, err
	})
	if err != nil {
		if done, exitErr := n.proc.exited(); done {
			err = fmt.Errorf("exited during start-up (%v)", exitErr)
		}
		return n.proc.startupError(err)
	}
	return nil
}

type exitedError struct{ err error }

func (e *exitedError) Error() string { return fmt.Sprintf("exited: %v", e.err) }

// Admin is a client connected straight to the node's real address, bypassing
// every proxy: for the harness's own inspection and control, never for workloads.
func (n *Node) Admin() *redis.Client { return n.admin }

// DirectAddr is the node's real listening address, bypassing every proxy:
// for a program that must reach the server as an outside deployment would
// (coordtorture's external provider under test), never for fault scenarios.
func (n *Node) DirectAddr() string { return net.JoinHostPort(n.ip, strconv.Itoa(serverPort)) }

// LogTail returns the last lines of the node's log.
func (n *Node) LogTail(lines int) string { return n.proc.logTail(lines) }

// Pid is the server's process id (0 when not running).
func (n *Node) Pid() int { return n.proc.pid() }

// Dir is the node's data directory.
func (n *Node) Dir() string { return n.dir }

// Running reports whether the server process is alive.
func (n *Node) Running() bool { done, _ := n.proc.exited(); return !done }

func newTopology(kind Kind, build string, opts []Option) (*Topology, error) {
	b, err := LookupBuild(build)
	if err != nil {
		return nil, err
	}
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.nodeConfig) > 0 && kind != KindReplicated {
		return nil, fmt.Errorf("%w: WithNodeConfig is for replicated topologies, not %s", ErrBadOption, kind)
	}
	var nodeBuilds map[string]*Build
	if len(cfg.nodeBuilds) > 0 {
		if kind != KindReplicated {
			return nil, fmt.Errorf("%w: WithNodeBuild is for replicated topologies, not %s", ErrBadOption, kind)
		}
		nodeBuilds = map[string]*Build{}
		for _, node := range sortedKeys(cfg.nodeBuilds) {
			nb, err := LookupBuild(cfg.nodeBuilds[node])
			if err != nil {
				return nil, fmt.Errorf("WithNodeBuild(%q): %w", node, err)
			}
			nodeBuilds[node] = nb
		}
	}
	dir, err := newTempDir()
	if err != nil {
		return nil, err
	}
	t := &Topology{Kind: kind, Build: b, cfg: cfg, nodeBuilds: nodeBuilds, dir: dir, peers: map[string]string{}, announce: "127.0.0.1"}
	t.sb = newSwitchboard(cfg.logf)
	if cfg.tls {
		if cfg.containers != nil {
			t.sb.close()
			_ = os.RemoveAll(dir)
			forgetDir(dir)
			return nil, fmt.Errorf("%w: WithTLS is for local processes, not WithContainers", ErrBadOption)
		}
		if t.tls, err = newTLSState(dir); err != nil {
			t.sb.close()
			_ = os.RemoveAll(dir)
			forgetDir(dir)
			return nil, fmt.Errorf("testbed: TLS certificates: %w", err)
		}
	}
	if cfg.containers != nil {
		if len(nodeBuilds) > 0 {
			t.sb.close()
			_ = os.RemoveAll(dir)
			forgetDir(dir)
			return nil, fmt.Errorf("%w: WithNodeBuild is for local processes, not WithContainers", ErrBadOption)
		}
		spawner() // the SIGINT/SIGTERM handler (KillAll), unless the caller handles signals
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if t.ctr, err = cfg.containers.Network(ctx, b.Name); err != nil {
			t.sb.close()
			_ = os.RemoveAll(dir)
			forgetDir(dir)
			return nil, err
		}
		trackNet(t.ctr, true)
		t.announce = t.ctr.Gateway()
		t.sb.listenIP = t.ctr.Gateway()
	}
	return t, nil
}

// startAll starts every node in order and closes the topology on failure.
func (t *Topology) startAll(ctx context.Context, ns []*Node) error {
	for _, n := range ns {
		if err := n.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// NewStandalone starts one server.
func NewStandalone(ctx context.Context, build string, opts ...Option) (_ *Topology, err error) {
	t, err := newTopology(KindStandalone, build, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	n, err := t.newNode("n1", false)
	if err != nil {
		return nil, err
	}
	if err := t.startAll(ctx, []*Node{n}); err != nil {
		return nil, err
	}
	return t, nil
}

// AddStandalone starts one more server beside the topology, a standalone one
// whatever the topology's kind, named name: a service the workloads use next
// to the system under test, such as the fenced resource they write to. Nodes
// does not list it; Node, Kill, Start, Pause and Resume find it by name, and
// its links ("c0→res") are cut and healed like any other (Partition, Isolate,
// HealAll). With aof it runs with appendonly yes and appendfsync always, so a
// kill -9 and restart keeps every acknowledged write. Close stops it.
func (t *Topology) AddStandalone(ctx context.Context, name string, aof bool) (*Node, error) {
	if t.Node(name) != nil {
		return nil, fmt.Errorf("testbed: a server named %q already exists", name)
	}
	n, err := t.makeNode(name, false, true)
	if err != nil {
		return nil, err
	}
	n.aof = aof
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// NewIndependentSet starts n unrelated servers (r1…rn), e.g. for Redlock.
func NewIndependentSet(ctx context.Context, build string, n int, opts ...Option) (_ *Topology, err error) {
	if n < 1 {
		return nil, fmt.Errorf("testbed: independent set needs at least one server, got %d", n)
	}
	t, err := newTopology(KindIndependent, build, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for i := 1; i <= n; i++ {
		if _, err := t.newNode(fmt.Sprintf("r%d", i), false); err != nil {
			return nil, err
		}
	}
	if err := t.startAll(ctx, t.nodes); err != nil {
		return nil, err
	}
	return t, nil
}

// NewReplicated starts one primary (n1), `replicas` replicas (n2…) and `sentinels`
// sentinels (s1…; 0 or at least 3 for a quorum), and waits until every replica's
// link is up and every sentinel sees every replica and every other sentinel.
func NewReplicated(ctx context.Context, build string, replicas, sentinels int, opts ...Option) (_ *Topology, err error) {
	if replicas < 1 {
		return nil, fmt.Errorf("testbed: a replicated topology needs at least one replica, got %d", replicas)
	}
	if sentinels != 0 && sentinels < 3 {
		return nil, fmt.Errorf("testbed: sentinels must be 0 or at least 3 (a quorum needs a majority), got %d", sentinels)
	}
	t, err := newTopology(KindReplicated, build, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	primary, err := t.newNode("n1", false)
	if err != nil {
		return nil, err
	}
	for i := 0; i < replicas; i++ {
		r, err := t.newNode(fmt.Sprintf("n%d", i+2), false)
		if err != nil {
			return nil, err
		}
		r.replicaOf = primary
	}
	for i := 0; i < sentinels; i++ {
		if _, err := t.newNode(fmt.Sprintf("s%d", i+1), true); err != nil {
			return nil, err
		}
	}
	for _, name := range sortedKeys(t.nodeBuilds) {
		if t.Node(name) == nil {
			return nil, fmt.Errorf("%w: WithNodeBuild(%q, %q): the topology has no node %q (data nodes n1…n%d, sentinels s1…s%d)",
				ErrBadOption, name, t.nodeBuilds[name].Name, name, len(t.nodes), len(t.sentinels))
		}
	}
	for _, name := range sortedKeys(t.cfg.nodeConfig) {
		if n := t.Node(name); n == nil || n.Sentinel {
			return nil, fmt.Errorf("%w: WithNodeConfig(%q, …): the topology has no data node %q (n1…n%d)",
				ErrBadOption, name, name, len(t.nodes))
		}
	}
	t0 := time.Now()
	if err := t.startAll(ctx, t.nodes); err != nil {
		return nil, err
	}
	t.cfg.logf("testbed: %s: data nodes up in %v", b2s(t), time.Since(t0))
	if err := t.waitReplication(ctx); err != nil {
		return nil, err
	}
	t.cfg.logf("testbed: %s: replication up in %v", b2s(t), time.Since(t0))
	if err := t.startAll(ctx, t.sentinels); err != nil {
		return nil, err
	}
	t.cfg.logf("testbed: %s: sentinels started in %v", b2s(t), time.Since(t0))
	if err := t.waitSentinels(ctx, primary); err != nil {
		return nil, err
	}
	t.cfg.logf("testbed: %s: sentinels ready in %v", b2s(t), time.Since(t0))
	return t, nil
}

// waitReplication waits until every replica reports master_link_status:up.
func (t *Topology) waitReplication(ctx context.Context) error {
	for _, n := range t.nodes {
		n.mu.Lock()
		isReplica := n.replicaOf != nil
		n.mu.Unlock()
		if !isReplica {
			continue
		}
		if err := waitFor(ctx, t.cfg.startTimeout, n.Name+" replication link up", func(ctx context.Context) (bool, error) {
			info, err := n.admin.Info(ctx, "replication").Result()
			if err != nil {
				return false, err
			}
			if infoField(info, "master_link_status") == "up" {
				return true, nil
			}
			if n.proc.lastLogLine(rdbTooNew) != "" {
				// It will never load it: no use waiting out the timeout.
				return false, &finalError{fmt.Errorf("%s: master_link_status=%s", n.Name, infoField(info, "master_link_status"))}
			}
			return false, fmt.Errorf("%s: master_link_status=%s", n.Name, infoField(info, "master_link_status"))
		}); err != nil {
			if line := n.proc.lastLogLine(rdbTooNew); line != "" {
				n.mu.Lock()
				p := n.replicaOf
				n.mu.Unlock()
				err = fmt.Errorf("%w: %s (%s) cannot load the snapshot of %s (%s): %q: %v",
					ErrIncompatibleReplica, n.Name, n.Build.Name, p.Name, p.Build.Name, line, err)
			}
			return t.withLogs(err, n)
		}
	}
	// A replica reports its link up when it has loaded the primary's snapshot;
	// the primary counts it online only after the replica's first REPLCONF ACK.
	// Until then FAILOVER refuses it ("target replica is not online") and
	// WAIT does not count it, so wait for the primary's view too.
	want := map[*Node]int{}
	for _, n := range t.nodes {
		n.mu.Lock()
		if n.replicaOf != nil {
			want[n.replicaOf]++
		}
		n.mu.Unlock()
	}
	for p, k := range want {
		if err := waitFor(ctx, t.cfg.startTimeout, p.Name+" to count its replicas online", func(ctx context.Context) (bool, error) {
			info, err := p.admin.Info(ctx, "replication").Result()
			if err != nil {
				return false, err
			}
			got := onlineReplicas(info)
			return got >= k, fmt.Errorf("%s counts %d of %d replicas online", p.Name, got, k)
		}); err != nil {
			return t.withLogs(err, p)
		}
	}
	return nil
}

// onlineReplicas counts the slaveN lines of a primary's INFO replication whose
// state is online.
func onlineReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			n++
		}
	}
	return n
}

// waitSentinels waits until every sentinel monitors primary and sees every
// replica and every other sentinel.
func (t *Topology) waitSentinels(ctx context.Context, primary *Node) error {
	wantReplicas := len(t.nodes) - 1
	for _, s := range t.sentinels {
		if err := waitFor(ctx, t.cfg.startTimeout, s.Name+" to see the whole topology", func(ctx context.Context) (bool, error) {
			m, err := s.admin.Do(ctx, "SENTINEL", "MASTER", MasterName).Result()
			if err != nil {
				return false, err
			}
			fields := toStringMap(m)
			if fields["port"] != port(primary.Addr) {
				return false, fmt.Errorf("%s monitors port %s, want %s", s.Name, fields["port"], port(primary.Addr))
			}
			ns, _ := strconv.Atoi(fields["num-other-sentinels"])
			nr, _ := strconv.Atoi(fields["num-slaves"])
			if ns != len(t.sentinels)-1 || nr != wantReplicas || strings.Contains(fields["flags"], "down") {
				return false, fmt.Errorf("%s sees %d other sentinels and %d replicas (want %d, %d), flags %s",
					s.Name, ns, nr, len(t.sentinels)-1, wantReplicas, fields["flags"])
			}
			// Every replica known to the sentinel must be up, not only listed.
			rs, err := s.admin.Do(ctx, "SENTINEL", "REPLICAS", MasterName).Result()
			if err != nil {
				return false, err
			}
			list, _ := rs.([]any)
			for _, r := range list {
				if f := toStringMap(r)["flags"]; strings.Contains(f, "down") || strings.Contains(f, "disconnected") {
					return false, fmt.Errorf("%s sees a replica with flags %s", s.Name, f)
				}
			}
			return true, nil
		}); err != nil {
			return t.withLogs(err, s)
		}
	}
	return nil
}

// NewCluster starts a Redis Cluster of `primaries` primaries (n1…) with
// `replicasPerPrimary` replicas each, slots split evenly, and waits until every
// node reports cluster_state:ok and knows every other node.
func NewCluster(ctx context.Context, build string, primaries, replicasPerPrimary int, opts ...Option) (_ *Topology, err error) {
	if primaries < 1 || replicasPerPrimary < 0 {
		return nil, fmt.Errorf("testbed: cluster needs primaries ≥ 1 and replicas ≥ 0, got %d, %d", primaries, replicasPerPrimary)
	}
	t, err := newTopology(KindCluster, build, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	total := primaries * (1 + replicasPerPrimary)
	for i := 1; i <= total; i++ {
		if _, err := t.newNode(fmt.Sprintf("n%d", i), false); err != nil {
			return nil, err
		}
	}
	if err := t.startAll(ctx, t.nodes); err != nil {
		return nil, err
	}
	ids := make([]string, total)
	for i, n := range t.nodes {
		if ids[i], err = n.admin.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			return nil, t.withLogs(err, n)
		}
		if err := n.admin.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return nil, t.withLogs(fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", n.Name, err), n)
		}
	}
	for i := 0; i < primaries; i++ {
		lo, hi := i*16384/primaries, (i+1)*16384/primaries-1
		if err := t.nodes[i].admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return nil, t.withLogs(fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", t.nodes[i].Name, err), t.nodes[i])
		}
	}
	first := t.nodes[0]
	for _, n := range t.nodes[1:] {
		if err := first.admin.Do(ctx, "CLUSTER", "MEET", t.announce, port(n.Addr), port(n.BusAddr)).Err(); err != nil {
			return nil, t.withLogs(fmt.Errorf("CLUSTER MEET %s: %w", n.Name, err), first)
		}
	}
	for _, n := range t.nodes {
		if err := waitFor(ctx, t.cfg.startTimeout, n.Name+" to know every node", func(ctx context.Context) (bool, error) {
			info, err := n.admin.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err
			}
			k := infoField(info, "cluster_known_nodes")
			return k == strconv.Itoa(total), fmt.Errorf("%s knows %s nodes of %d", n.Name, k, total)
		}); err != nil {
			return nil, t.withLogs(err, n)
		}
	}
	for j := primaries; j < total; j++ {
		p := (j - primaries) % primaries
		r := t.nodes[j]
		r.replicaOf = t.nodes[p]
		if err := waitFor(ctx, t.cfg.startTimeout, r.Name+" CLUSTER REPLICATE", func(ctx context.Context) (bool, error) {
			err := r.admin.Do(ctx, "CLUSTER", "REPLICATE", ids[p]).Err()
			return err == nil, err
		}); err != nil {
			return nil, t.withLogs(err, r)
		}
	}
	if err := t.waitReplication(ctx); err != nil {
		return nil, err
	}
	for _, p := range t.nodes[:primaries] {
		if err := waitFor(ctx, t.cfg.startTimeout, p.Name+" to see its replicas online", func(ctx context.Context) (bool, error) {
			info, err := p.admin.Info(ctx, "replication").Result()
			if err != nil {
				return false, err
			}
			n := infoField(info, "connected_slaves")
			return n == strconv.Itoa(replicasPerPrimary), fmt.Errorf("%s has %s replicas", p.Name, n)
		}); err != nil {
			return nil, t.withLogs(err, p)
		}
	}
	if err := t.WaitClusterOK(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// WaitClusterOK waits until every running, unpaused node reports cluster_state:ok
// with all 16384 slots assigned and agrees with the others on who serves them.
func (t *Topology) WaitClusterOK(ctx context.Context) error {
	for _, n := range t.nodes {
		if !n.Running() || n.isPaused() {
			continue
		}
		if err := waitFor(ctx, t.cfg.startTimeout, n.Name+" cluster_state:ok", func(ctx context.Context) (bool, error) {
			info, err := n.admin.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err
			}
			ok := infoField(info, "cluster_state") == "ok" && infoField(info, "cluster_slots_ok") == "16384"
			return ok, fmt.Errorf("%s: cluster_state=%s slots_ok=%s", n.Name, infoField(info, "cluster_state"), infoField(info, "cluster_slots_ok"))
		}); err != nil {
			return t.withLogs(err, n)
		}
	}
	return waitFor(ctx, t.cfg.startTimeout, "nodes to agree on slot owners", func(ctx context.Context) (bool, error) {
		var ref string
		for _, n := range t.nodes {
			if !n.Running() || n.isPaused() {
				continue
			}
			s, err := slotOwners(ctx, n.admin)
			if err != nil {
				return false, err
			}
			if ref == "" {
				ref = s
			} else if s != ref {
				return false, fmt.Errorf("%s disagrees on slot owners", n.Name)
			}
		}
		return true, nil
	})
}

// slotOwners summarises CLUSTER SHARDS as "lo-hi:addr,…" (primaries only).
func slotOwners(ctx context.Context, c *redis.Client) (string, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, s := range shards {
		addr := shardPrimary(s)
		for _, r := range s.Slots {
			parts = append(parts, fmt.Sprintf("%d-%d:%s", r.Start, r.End, addr))
		}
	}
	sortStrings(parts)
	return strings.Join(parts, ","), nil
}

// shardPrimary is the announced address of a shard's primary ("" if none).
func shardPrimary(s redis.ClusterShard) string {
	for _, n := range s.Nodes {
		if n.Role == "master" && n.Health == "online" {
			return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
		}
	}
	return ""
}

func (t *Topology) withLogs(err error, ns ...*Node) error {
	var b strings.Builder
	for _, n := range ns {
		fmt.Fprintf(&b, "\n=== %s log\n%s", n.proc.label(), n.LogTail(20))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// Nodes returns the data nodes (primary first for replicated topologies, as started).
func (t *Topology) Nodes() []*Node { return append([]*Node(nil), t.nodes...) }

// Sentinels returns the sentinels.
func (t *Topology) Sentinels() []*Node { return append([]*Node(nil), t.sentinels...) }

// Aux returns the servers AddStandalone started beside the topology.
func (t *Topology) Aux() []*Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Node(nil), t.aux...)
}

// Node returns the node, sentinel or auxiliary server with the given name, or nil.
func (t *Topology) Node(name string) *Node {
	for _, n := range append(append(t.Nodes(), t.sentinels...), t.Aux()...) {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Dir is the topology's temp directory (removed by Close).
func (t *Topology) Dir() string { return t.dir }

// Logs returns the last lines of every server's log.
func (t *Topology) Logs(lines int) string {
	var b strings.Builder
	for _, n := range append(append(t.Nodes(), t.sentinels...), t.Aux()...) {
		fmt.Fprintf(&b, "=== %s\n%s\n", n.proc.label(), n.LogTail(lines))
	}
	return b.String()
}

// Close stops every server (kill -9 of its process group), closes every client
// and proxy made by the topology, and removes its directory. Safe to call twice.
func (t *Topology) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	clients := t.clients
	t.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	var wg sync.WaitGroup
	for _, n := range append(append(t.Nodes(), t.sentinels...), t.Aux()...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.proc.kill()
			_ = n.admin.Close()
		}()
	}
	wg.Wait()
	t.sb.close()
	var derr error
	if t.ctr != nil {
		derr = t.ctr.Close()
		trackNet(t.ctr, false)
	}
	err := os.RemoveAll(t.dir)
	forgetDir(t.dir)
	return errors.Join(err, derr)
}

func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// toStringMap reads a RESP2 flat array or RESP3 map reply into strings.
func toStringMap(v any) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
		}
	case map[any]any:
		for k, val := range x {
			out[fmt.Sprint(k)] = fmt.Sprint(val)
		}
	}
	return out
}

func b2s(t *Topology) string {
	if len(t.nodeBuilds) == 0 {
		return fmt.Sprintf("%s %s", t.Build.Name, t.Kind)
	}
	var b strings.Builder
	for _, n := range append(slices.Clone(t.nodes), t.sentinels...) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", n.Name, n.Build.Name)
	}
	return fmt.Sprintf("mixed %s (%s)", t.Kind, b.String())
}
