// Package compose holds the docker-compose topologies users bring up by hand
// (see README.md) and no Go code: this test brings each one up with the local
// images (scripts/build-images.sh), checks it serves what a client on the host
// needs, and that tearing it down leaves nothing behind.
package compose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/internal/preflight"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed"
	"github.com/coordtorture/coordtorture/testbed/docker"
)

// composeCmd is the compose CLI: docker-compose (v1, as Debian ships it) or
// the docker compose plugin.
var composeCmd []string

// imageOf names the local image of a build: redis-8.0 -> coordtorture/redis:8.0.
func imageOf(build string) string {
	flavor, version, _ := strings.Cut(build, "-")
	return "coordtorture/" + flavor + ":" + version
}

// engine skips the test when no Docker engine is reachable (the only reason to
// skip), finds the compose CLI and builds the images of the matrix's builds
// (a no-op when they are up to date).
func engine(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker CLI on PATH: the compose topologies need a Docker engine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine reachable (docker version: %v: %s): the compose topologies need one", err, bytes.TrimSpace(out))
	}
	switch {
	case lookPath("docker-compose"):
		composeCmd = []string{"docker-compose"}
	case exec.Command("docker", "compose", "version").Run() == nil:
		composeCmd = []string{"docker", "compose"}
	default:
		t.Fatal("a Docker engine is reachable but neither docker-compose nor the docker compose plugin is installed")
	}
	builds := docker.NeedImages(t, testbed.Matrix()...)
	return builds
}

func lookPath(name string) bool { _, err := exec.LookPath(name); return err == nil }

// project is one compose file brought up under a unique project name.
type project struct {
	t     *testing.T
	file  string
	name  string
	env   []string
	start time.Time // when up began
}

// serving logs how long the project took from up to serving (the start time
// the report measures).
func (p *project) serving() {
	p.t.Logf("%s: serving %v after up began", p.file, time.Since(p.start).Round(time.Millisecond))
}

func (p *project) compose(ctx context.Context, args ...string) (string, error) {
	all := append(append(slices.Clone(composeCmd[1:]), "-p", p.name, "-f", p.file), args...)
	cmd := exec.CommandContext(ctx, composeCmd[0], all...)
	cmd.Env = append(os.Environ(), p.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// up brings the project up and registers its teardown, which runs whether the
// test passes or fails, and then checks nothing of the project is left.
func up(t *testing.T, file, image string, env ...string) *project {
	t.Helper()
	// Unique per test process and subtest (lower case letters and digits only).
	name := fmt.Sprintf("cttest%d%s", os.Getpid(), strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, strings.ToLower(t.Name())))
	p := &project{t: t, file: file, name: name,
		env: append([]string{"REDIS_IMAGE=" + image}, env...)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := p.compose(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("%s down: %v\n%s", file, err, out)
		}
		for _, kind := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
			args := append(slices.Clone(kind), "-q", "--filter", "label=com.docker.compose.project="+p.name)
			out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Errorf("after down, docker %s of project %s: %v %q", kind[0], p.name, err, out)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.start = time.Now()
	if out, err := p.compose(ctx, "up", "-d"); err != nil {
		logs, _ := p.compose(ctx, "logs", "--no-color")
		t.Fatalf("%s up: %v\n%s\n%s", file, err, out, logs)
	}
	t.Logf("%s (%s): up -d in %v", file, image, time.Since(p.start).Round(time.Millisecond))
	return p
}

// eventually polls f until it succeeds or a generous bound (the machine is
// shared) passes; the last error fails the test, with the project's logs.
func (p *project) eventually(what string, f func(ctx context.Context) error) {
	p.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = f(ctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs, _ := p.compose(ctx, "logs", "--no-color", "--tail", "30")
	p.t.Fatalf("%s: %s: %v\n%s", p.file, what, err, logs)
}

// fencedLock acquires and releases a prim fenced lock through client (a
// go-redis client with default options, as users have), and checks a second
// acquisition while it is held is refused.
func fencedLock(ctx context.Context, client redis.UniversalClient, name string) error {
	c := prim.New(client).WithPrefix("compose-test:")
	lease, fence := "{"+name+"}:lease", "{"+name+"}:fence"
	l, err := c.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	defer l.Close()
	if l.FencingToken() < 1 {
		return fmt.Errorf("fencing token %d", l.FencingToken())
	}
	if _, err := c.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
		return fmt.Errorf("a second acquisition while held: %v, want ErrNotAcquired", err)
	}
	if _, err := l.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// external runs fenced-lock/baseline through the external provider (the path
// `coordtorture run --provider external` takes) and wants PASS.
func external(t *testing.T, ext *scenarios.External) {
	t.Helper()
	ss, err := scenarios.Match([]string{"fenced-lock/baseline"})
	if err != nil || len(ss) != 1 {
		t.Fatalf("fenced-lock/baseline: %v %v", ss, err)
	}
	o, err := scenarios.Run(context.Background(), ss[0], scenarios.Config{External: ext, Duration: 2 * time.Second, Clients: 2, Seed: 1})
	if err != nil {
		t.Fatalf("external provider on %v: %v", ext.Addrs, err)
	}
	if o.Verdict != models.JudgedPass {
		t.Fatalf("fenced-lock/baseline on %v: %v, want PASS: %+v", ext.Addrs, o.Verdict, o.Results)
	}
}

// externalSet runs, through the external provider, every scenario an
// external deployment can run (scenarios.Scenario.Runnable), as `coordtorture
// run --provider external` with no pattern does, on prim: each must PASS, or
// be N/A naming what the server lacks (hash-lease without hash-field
// expiry); none UNKNOWN for what an external deployment cannot give.
func externalSet(t *testing.T, ext *scenarios.External) {
	t.Helper()
	n := 0
	for _, s := range scenarios.All() {
		if s.Runnable(true) != nil || !s.Supports("prim") {
			continue
		}
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		o, err := scenarios.Run(ctx, s, scenarios.Config{External: ext, Duration: 3 * time.Second, Clients: 4, Seed: 1})
		cancel()
		switch {
		case err != nil:
			t.Errorf("%s on %v: %v", s.Name, ext.Addrs, err)
		case o.Verdict == models.JudgedNA && o.Unsupported != "":
			t.Logf("%s on %v: N/A: %s", s.Name, ext.Addrs, o.Unsupported)
		case o.Verdict != models.JudgedPass:
			t.Errorf("%s on %v: %v (%s), want PASS: %+v", s.Name, ext.Addrs, o.Verdict, o.Error, o.Results)
		}
	}
	if n == 0 {
		t.Error("no scenario runs on an external deployment")
	}
}

// checkPreflight runs coordtorture preflight's checks, with the write probe
// (every primitive once through prim on probe keys, then deleted), against
// a compose topology, as its README shows: the topology is recognised, the
// server line is OK, nothing FAILs (a compose topology has no persistence
// and no min-replicas-to-write: WARNs; hash-field leases on a server without
// hash-field expiry excepted), and every write probe is OK.
func checkPreflight(t *testing.T, o preflight.Options, topology string) {
	t.Helper()
	o.WriteProbe = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := preflight.Run(ctx, o)
	if err != nil {
		t.Fatalf("preflight on %v: %v", o.Addrs, err)
	}
	var text strings.Builder
	_ = r.WriteText(&text)
	if r.Topology != topology {
		t.Fatalf("preflight on %v: topology %q (want %q):\n%s", o.Addrs, r.Topology, topology, text.String())
	}
	// A server without hash-field expiry (Redis 7.0, Valkey 8.1) cannot hold
	// hash-field leases: that primitive is FAIL there and its probe not run;
	// everything else must pass.
	noHFE := false
	for _, c := range r.Checks {
		noHFE = noHFE || c.Name == "primitive/hash-lease" && c.Status == preflight.Fail
	}
	probes := 0
	for _, c := range r.Checks {
		hfe := noHFE && (c.Name == "primitive/hash-lease" || c.Name == "write-probe/hash-lease")
		if c.Status == preflight.Fail && !hfe ||
			(c.Name == "server" || strings.HasPrefix(c.Name, "write-probe/") && !hfe) && c.Status != preflight.OK {
			t.Errorf("preflight on %v: %s is %s: %s\n%s", o.Addrs, c.Name, c.Status, c.Reason, text.String())
		}
		if strings.HasPrefix(c.Name, "write-probe/") && !hfe {
			probes++
		}
	}
	if probes == 0 {
		t.Errorf("preflight on %v ran no write probe:\n%s", o.Addrs, text.String())
	}
}

// freePorts returns n distinct TCP ports of 127.0.0.1 that were free a moment
// ago (held open together, so distinct, and closed again for compose to
// publish), each at most highest, and the compose variables that set them:
// names[i]=port. The topologies run on these, not on the files' defaults, so a
// user's own stack on the default ports and the tests run side by side.
func freePorts(t *testing.T, highest int, names ...string) ([]int, []string) {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	var env []string
	for tries := 0; len(ports) < len(names); tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports at most %d on 127.0.0.1", len(names), highest)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		if port := l.Addr().(*net.TCPAddr).Port; port <= highest {
			env = append(env, fmt.Sprintf("%s=%d", names[len(ports)], port))
			ports = append(ports, port)
		}
	}
	return ports, env
}

// addrs are ports' 127.0.0.1 addresses.
func addrs(ports ...int) []string {
	var a []string
	for _, p := range ports {
		a = append(a, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return a
}

// TestComposeTopologies brings every compose file up with the local images,
// at once, every host port on a free port through the files' variables (not
// the defaults, which a user's own stack may hold): standalone once per build
// of the matrix, the others once each, spread over the matrix's builds.
func TestComposeTopologies(t *testing.T) {
	builds := engine(t)
	pick := func(i int) string { return imageOf(builds[i%len(builds)]) }

	for i, b := range builds {
		t.Run("standalone/"+b, func(t *testing.T) {
			t.Parallel()
			ports, env := freePorts(t, 65535, "STANDALONE_PORT")
			p := up(t, "standalone.yml", imageOf(b), env...)
			addr := addrs(ports...)[0]
			client := redis.NewClient(&redis.Options{Addr: addr})
			defer client.Close()
			p.eventually("PING", func(ctx context.Context) error { return client.Ping(ctx).Err() })
			p.serving()
			info, err := client.Info(context.Background(), "server").Result()
			if err != nil || !strings.Contains(info, "process_id:1\r") {
				t.Errorf("the server is not the container's process 1 (the entrypoint execs it): %v", err)
			}
			p.eventually("a fenced lock", func(ctx context.Context) error { return fencedLock(ctx, client, "standalone") })
			if i == 0 {
				// The whole external set once (a minute of work), on the
				// first build: with the full matrix, redis-7.0, whose
				// hash-lease scenarios are N/A.
				externalSet(t, &scenarios.External{Addrs: []string{addr}})
			} else {
				external(t, &scenarios.External{Addrs: []string{addr}})
			}
			checkPreflight(t, preflight.Options{Addrs: []string{addr}}, "standalone")
		})
	}

	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		ports, env := freePorts(t, 65535, "SENTINEL_PRIMARY_PORT", "SENTINEL_REPLICA1_PORT", "SENTINEL_REPLICA2_PORT",
			"SENTINEL1_PORT", "SENTINEL2_PORT", "SENTINEL3_PORT")
		p := up(t, "sentinel.yml", pick(1), env...)
		sentinels := addrs(ports[3:]...)
		for _, s := range sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s})
			defer sc.Close()
			p.eventually("sentinel "+s+" knows the primary and both replicas", func(ctx context.Context) error {
				addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
				if err != nil {
					return err
				}
				if len(addr) != 2 || addr[0] != "127.0.0.1" || addr[1] != fmt.Sprint(ports[0]) {
					return fmt.Errorf("get-master-addr-by-name: %v, want 127.0.0.1 %d", addr, ports[0])
				}
				replicas, err := sc.Replicas(ctx, "mymaster").Result()
				if err != nil {
					return err
				}
				if len(replicas) != 2 {
					return fmt.Errorf("%d replicas known, want 2", len(replicas))
				}
				return nil
			})
		}
		p.serving()
		client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: sentinels})
		defer client.Close()
		p.eventually("a fenced lock through the sentinels", func(ctx context.Context) error { return fencedLock(ctx, client, "sentinel") })
		external(t, &scenarios.External{Addrs: sentinels, MasterName: "mymaster"})
		checkPreflight(t, preflight.Options{Addrs: sentinels, MasterName: "mymaster"}, "sentinel")
	})

	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		// A node's cluster bus is its port + 10000, in the nodes' shared
		// network namespace (not published).
		ports, env := freePorts(t, 65535-10000, "CLUSTER_NODE1_PORT", "CLUSTER_NODE2_PORT", "CLUSTER_NODE3_PORT",
			"CLUSTER_NODE4_PORT", "CLUSTER_NODE5_PORT", "CLUSTER_NODE6_PORT")
		p := up(t, "cluster.yml", pick(2), env...)
		for _, port := range ports {
			node := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
			defer node.Close()
			p.eventually(fmt.Sprintf("cluster_state:ok on :%d", port), func(ctx context.Context) error {
				info, err := node.ClusterInfo(ctx).Result()
				if err != nil {
					return err
				}
				if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
					return fmt.Errorf("CLUSTER INFO: %s", info)
				}
				return nil
			})
		}
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs(ports[0])})
		defer client.Close()
		// The replicas' roles reach every node by gossip, after cluster_state:ok.
		p.eventually("three shards of a primary and a replica each, at host addresses", func(ctx context.Context) error {
			shards, err := client.ClusterShards(ctx).Result()
			if err != nil {
				return err
			}
			if len(shards) != 3 {
				return fmt.Errorf("%d shards, want 3: %v", len(shards), shards)
			}
			for _, s := range shards {
				if len(s.Nodes) != 2 {
					return fmt.Errorf("shard %v has %d nodes, want 2: %v", s.Slots, len(s.Nodes), s.Nodes)
				}
				for _, n := range s.Nodes {
					if n.Endpoint != "127.0.0.1" || !slices.Contains(ports, int(n.Port)) {
						return fmt.Errorf("shard %v announces %s:%d, not reachable from the host", s.Slots, n.Endpoint, n.Port)
					}
				}
			}
			return nil
		})
		p.serving()
		// Locks on several slots, so more than one primary answers.
		for _, name := range []string{"a", "b", "c", "d"} {
			p.eventually("a fenced lock on the cluster ("+name+")", func(ctx context.Context) error { return fencedLock(ctx, client, name) })
		}
		external(t, &scenarios.External{Addrs: addrs(ports[:3]...), Cluster: true})
		checkPreflight(t, preflight.Options{Addrs: addrs(ports[0]), Cluster: true}, "cluster")
	})

	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		ports, env := freePorts(t, 65535, "REDLOCK_NODE1_PORT", "REDLOCK_NODE2_PORT", "REDLOCK_NODE3_PORT")
		p := up(t, "redlock.yml", pick(3), env...)
		var ids []string
		for _, port := range ports {
			node := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
			defer node.Close()
			p.eventually(fmt.Sprintf("PING :%d", port), func(ctx context.Context) error { return node.Ping(ctx).Err() })
			p.eventually(fmt.Sprintf("a fenced lock on :%d", port), func(ctx context.Context) error { return fencedLock(ctx, node, "redlock") })
			info, err := node.Info(context.Background(), "server", "replication").Result()
			if err != nil || !strings.Contains(info, "role:master") || !strings.Contains(info, "connected_slaves:0") {
				t.Fatalf(":%d is not an independent primary: %v\n%s", port, err, info)
			}
			for _, line := range strings.Split(info, "\r\n") {
				if strings.HasPrefix(line, "run_id:") {
					ids = append(ids, line)
				}
			}
		}
		p.serving()
		if slices.Sort(ids); len(slices.Compact(ids)) != 3 {
			t.Fatalf("the three ports are not three servers: %v", ids)
		}
	})
}
