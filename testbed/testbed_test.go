package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/testbed"
)

// forEachBuild runs f once per server build of the matrix. A build that is not
// fetched fails the test: nothing in the matrix is skipped silently.
func forEachBuild(t *testing.T, f func(t *testing.T, build string)) {
	t.Helper()
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			if _, err := testbed.LookupBuild(b); err != nil {
				t.Fatalf("%v", err)
			}
			f(t, b)
		})
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustClient(t *testing.T, topo *testbed.Topology, opts ...testbed.ClientOption) redis.UniversalClient {
	t.Helper()
	c, err := topo.Client(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func replInfo(t *testing.T, ctx context.Context, topo *testbed.Topology, node string) map[string]string {
	t.Helper()
	info, err := topo.ReplicationInfo(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v (last: %s)", what, d, last)
}

func TestTopologiesServe(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, 2*time.Minute)
		t.Run("standalone", func(t *testing.T) {
			topo := testbed.Standalone(t, build)
			c := mustClient(t, topo)
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if got := topo.Node("n1").Admin().Get(ctx, "k").Val(); got != "v" {
				t.Fatalf("admin read %q, want v", got)
			}
			assertViaProxy(t, topo, "client→n1")
		})
		t.Run("independent-set", func(t *testing.T) {
			topo := testbed.IndependentSet(t, build, 3)
			for i, n := range topo.Nodes() {
				c, err := topo.NodeClient(n.Name)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Set(ctx, "k", i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for i, n := range topo.Nodes() {
				if got := n.Admin().Get(ctx, "k").Val(); got != strconv.Itoa(i) {
					t.Fatalf("%s holds %q, want %d: the servers are not independent", n.Name, got, i)
				}
			}
		})
		t.Run("replicated", func(t *testing.T) {
			topo := testbed.Replicated(t, build, 2, 3)
			c := mustClient(t, topo)
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := topo.WaitInSync(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			for _, r := range []string{"n2", "n3"} {
				if got := topo.Node(r).Admin().Get(ctx, "k").Val(); got != "v" {
					t.Fatalf("replica %s holds %q, want v", r, got)
				}
				assertViaProxy(t, topo, r+"→n1")
				for _, s := range []string{"s1", "s2", "s3"} {
					assertViaProxy(t, topo, s+"→"+r)
				}
			}
			// The client asks the sentinels it needs, through their links: go-redis
			// queries them concurrently and keeps the first answer, so which of
			// them it dialled depends on timing (CI once saw only s1).
			viaSentinel := false
			for _, l := range topo.Links() {
				viaSentinel = viaSentinel || l.Name == "client→s1" || l.Name == "client→s2" || l.Name == "client→s3"
			}
			if !viaSentinel {
				assertViaProxy(t, topo, "client→s1")
			}
		})
		t.Run("cluster", func(t *testing.T) {
			topo := testbed.Cluster(t, build, 3, 1)
			c := mustClient(t, topo)
			for i := 0; i < 200; i++ {
				if err := c.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			total := int64(0)
			for _, n := range topo.Nodes()[:3] {
				total += n.Admin().DBSize(ctx).Val()
			}
			if total != 200 {
				t.Fatalf("primaries hold %d keys, want 200", total)
			}
			for _, n := range topo.Nodes()[:3] {
				if n.Admin().DBSize(ctx).Val() == 0 {
					t.Fatalf("%s got no keys: slots not spread", n.Name)
				}
			}
			assertViaProxy(t, topo, "n1→n2.bus")
			assertViaProxy(t, topo, "n4→n1")
		})
	})
}

// assertViaProxy checks that a link was made (something connected through it) and
// that cutting it is observable on that path alone.
func assertViaProxy(t *testing.T, topo *testbed.Topology, name string) {
	t.Helper()
	for _, l := range topo.Links() {
		if l.Name == name {
			return
		}
	}
	var names []string
	for _, l := range topo.Links() {
		names = append(names, l.Name)
	}
	t.Fatalf("no traffic went through link %s (links: %s)", name, strings.Join(names, ", "))
}

func TestReplicationLinkCut(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Replicated(t, build, 1, 0, testbed.WithReplTimeout(2*time.Second))
		c := mustClient(t, topo)
		if err := topo.Partition("n2", "n1"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		eventually(t, 10*time.Second, "replica to see its link down", func() (bool, string) {
			s := replInfo(t, ctx, topo, "n2")["master_link_status"]
			return s == "down", s
		})
		t.Logf("link down after %v", time.Since(start))
		if err := c.Set(ctx, "during", "cut", 0).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if got := topo.Node("n2").Admin().Exists(ctx, "during").Val(); got != 0 {
			t.Fatal("a write crossed the cut replication link")
		}
		// The client link is a different link: it must still work.
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("client link affected by the replication cut: %v", err)
		}
		if err := topo.HealAll(); err != nil {
			t.Fatal(err)
		}
		if err := topo.WaitInSync(ctx, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := topo.Node("n2").Admin().Get(ctx, "during").Val(); got != "cut" {
			t.Fatalf("after heal the replica holds %q, want cut", got)
		}
	})
}

func TestForcedPromotionLosesAcknowledgedWrite(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Replicated(t, build, 1, 0)
		c := mustClient(t, topo)
		if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := topo.WaitInSync(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := topo.Partition("n2", "n1"); err != nil {
			t.Fatal(err)
		}
		// Acknowledged by the old primary, never replicated.
		if err := c.Set(ctx, "lost", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := topo.ForcePromote(ctx, "n2"); err != nil {
			t.Fatal(err)
		}
		if err := topo.HealAll(); err != nil {
			t.Fatal(err)
		}
		if err := topo.WaitInSync(ctx, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		p, err := topo.Primary(ctx)
		if err != nil || p.Name != "n2" {
			t.Fatalf("primary = %v, %v; want n2", p, err)
		}
		for _, n := range []string{"n1", "n2"} {
			a := topo.Node(n).Admin()
			if a.Get(ctx, "before").Val() != "1" {
				t.Fatalf("%s lost the replicated write", n)
			}
			if a.Exists(ctx, "lost").Val() != 0 {
				t.Fatalf("%s still holds the unreplicated write: the promotion lost nothing", n)
			}
		}
	})
}

func TestSentinelFailoverClientFollows(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, 2*time.Minute)
		topo := testbed.Replicated(t, build, 2, 3)
		c := mustClient(t, topo)
		if err := c.Set(ctx, "x", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := topo.WaitInSync(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		np, err := topo.FailoverSentinel(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if np.Name == "n1" {
			t.Fatal("failover kept n1 as primary")
		}
		eventually(t, 15*time.Second, "failover client to write to the new primary", func() (bool, string) {
			err := c.Set(ctx, "x", "2", 0).Err()
			if err != nil {
				return false, err.Error()
			}
			v := np.Admin().Get(ctx, "x").Val()
			return v == "2", "new primary holds " + v
		})
		if role := np.Admin().Do(ctx, "ROLE").Val(); fmt.Sprint(role.([]any)[0]) != "master" {
			t.Fatalf("%s role %v", np.Name, role)
		}
	})
}

func TestFailoverCommand(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Replicated(t, build, 1, 0)
		c, err := topo.NodeClient("n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := topo.FailoverCommand(ctx, "n2"); err != nil {
			t.Fatal(err)
		}
		p, err := topo.Primary(ctx)
		if err != nil || p.Name != "n2" {
			t.Fatalf("primary = %v, %v; want n2", p, err)
		}
		if p.Admin().Get(ctx, "k").Val() != "v" {
			t.Fatal("coordinated failover lost a write")
		}
		if err := c.Set(ctx, "k2", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
			t.Fatalf("old primary accepted a write after FAILOVER: %v", err)
		}
	})
}

func TestClusterFailover(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, 2*time.Minute)
		topo := testbed.Cluster(t, build, 3, 1)
		c := mustClient(t, topo)
		for i := 0; i < 50; i++ {
			if err := c.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if r, err := topo.ClusterReplicaOf(ctx, 0); err != nil || r.Name != "n4" {
			t.Fatalf("replica of slot 0's primary n1: %v %v, want n4", r, err)
		}
		if err := topo.ClusterFailover(ctx, "n4", ""); err != nil {
			t.Fatal(err)
		}
		if r := topo.Node("n1").Admin().Do(ctx, "ROLE").Val().([]any)[0]; fmt.Sprint(r) != "slave" {
			t.Fatalf("n1 role %v after failover to n4", r)
		}
		if r, err := topo.ClusterReplicaOf(ctx, 0); err != nil || r.Name != "n1" {
			t.Fatalf("replica of slot 0's primary after the failover: %v %v, want n1", r, err)
		}
		eventually(t, 15*time.Second, "cluster client to read every key", func() (bool, string) {
			for i := 0; i < 50; i++ {
				v, err := c.Get(ctx, fmt.Sprintf("key:%d", i)).Result()
				if err != nil || v != strconv.Itoa(i) {
					return false, fmt.Sprintf("key:%d = %q, %v", i, v, err)
				}
			}
			return true, ""
		})
	})
}

func TestPauseResume(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Standalone(t, build)
		c := mustClient(t, topo, testbed.WithTimeout(300*time.Millisecond),
			testbed.WithOptions(func(o *redis.UniversalOptions) { o.MaxRetries = -1 }))
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := topo.Pause("n1"); err != nil {
			t.Fatal(err)
		}
		err := c.Ping(ctx).Err()
		var ne interface{ Timeout() bool }
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("PING to a paused server: %v, want a timeout", err)
		}
		if err := topo.Resume("n1"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "resumed server to answer", func() (bool, string) {
			err := c.Ping(ctx).Err()
			return err == nil, fmt.Sprint(err)
		})
	})
}

func TestKillRestart(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		for _, aof := range []bool{false, true} {
			t.Run(fmt.Sprintf("aof=%v", aof), func(t *testing.T) {
				topo := testbed.Standalone(t, build, testbed.WithAOF(aof))
				c := mustClient(t, topo)
				if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
					t.Fatal(err)
				}
				pid := topo.Node("n1").Pid()
				if err := topo.Restart(ctx, "n1"); err != nil {
					t.Fatal(err)
				}
				if topo.Node("n1").Pid() == pid {
					t.Fatal("restart kept the same process")
				}
				var got string
				eventually(t, 5*time.Second, "client to reconnect", func() (bool, string) {
					v, err := c.Get(ctx, "k").Result()
					got = v
					return err == nil || errors.Is(err, redis.Nil), fmt.Sprint(err)
				})
				if aof && got != "v" {
					t.Fatalf("appendfsync always lost an acknowledged write (got %q)", got)
				}
				if !aof && got != "" {
					t.Fatalf("a restart without persistence kept data (%q)", got)
				}
			})
		}
	})
}

func TestClockSkew(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Standalone(t, build)
		for _, off := range []time.Duration{time.Hour, -90 * time.Second, 0} {
			if err := topo.SetClockOffset(ctx, "n1", off); err != nil {
				t.Fatal(err)
			}
			st, err := topo.ServerTime(ctx, "n1")
			if err != nil {
				t.Fatal(err)
			}
			if got := time.Until(st); got < off-2*time.Second || got > off+2*time.Second {
				t.Fatalf("offset %v: server TIME is %v from ours", off, got)
			}
			// Key expiry runs on the skewed clock too: PEXPIREAT at "our now + 1h" is
			// already past for a server 1h ahead.
			a := topo.Node("n1").Admin()
			a.Set(ctx, "e", "1", 0)
			a.PExpireAt(ctx, "e", time.Now().Add(30*time.Minute))
			exists := a.Exists(ctx, "e").Val() == 1
			if want := off < 30*time.Minute; exists != want {
				t.Fatalf("offset %v: key with PEXPIREAT now+30m exists=%v", off, exists)
			}
		}
	})
}

func TestLinkFaults(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Standalone(t, build)
		c := mustClient(t, topo, testbed.WithTimeout(time.Second),
			testbed.WithOptions(func(o *redis.UniversalOptions) { o.MaxRetries = -1; o.PoolSize = 1 }))
		other := mustClient(t, topo, testbed.AsPeer("c2"))
		link, err := topo.Link(testbed.ClientPeer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}

		t.Run("latency", func(t *testing.T) {
			if err := link.Latency(100*time.Millisecond, 0); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if rtt := time.Since(start); rtt < 190*time.Millisecond {
				t.Fatalf("round trip %v with 100ms each way", rtt)
			}
			// Another peer's link is not slowed: a slowed one takes 200ms
			// every time, an unslowed one is quick at least once in five
			// (one round trip took 199ms in a CI run at load 21).
			fastest := time.Hour
			for range 5 {
				start = time.Now()
				if err := other.Ping(ctx).Err(); err != nil {
					t.Fatalf("another peer's link: %v", err)
				}
				fastest = min(fastest, time.Since(start))
			}
			if fastest >= 150*time.Millisecond {
				t.Fatalf("another peer's link was slowed too: its fastest of five round trips took %v", fastest)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("lose-replies", func(t *testing.T) {
			if err := link.LoseReplies(); err != nil {
				t.Fatal(err)
			}
			if err := c.Incr(ctx, "ctr").Err(); err == nil {
				t.Fatal("INCR got a reply through a link that loses replies")
			}
			// The command ran although its reply was lost: an unknown outcome.
			if v := topo.Node("n1").Admin().Get(ctx, "ctr").Val(); v != "1" {
				t.Fatalf("counter %q: the request did not reach the server", v)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("partition", func(t *testing.T) {
			if err := topo.Isolate("n1"); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "p", "1", 0).Err(); err == nil {
				t.Fatal("write succeeded across a partition")
			}
			if err := other.Ping(ctx).Err(); err == nil {
				t.Fatal("isolated node answered another peer")
			}
			if topo.Node("n1").Admin().Exists(ctx, "p").Val() != 0 {
				t.Fatal("a partitioned write reached the server")
			}
			if err := topo.HealAll(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "healed link to serve", func() (bool, string) {
				err := c.Ping(ctx).Err()
				return err == nil, fmt.Sprint(err)
			})
		})
		t.Run("reset-peer", func(t *testing.T) {
			if err := link.ResetPeer(0); err != nil {
				t.Fatal(err)
			}
			if err := c.Ping(ctx).Err(); err == nil {
				t.Fatal("PING succeeded through reset_peer")
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("black-hole", func(t *testing.T) {
			if err := link.BlackHole(200 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := c.Ping(ctx).Err()
			if err == nil {
				t.Fatal("PING succeeded through a black hole")
			}
			if el := time.Since(start); el > 900*time.Millisecond {
				t.Fatalf("black hole with a 200ms timeout took %v to close (%v)", el, err)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("refuse", func(t *testing.T) {
			if err := link.Refuse(); err != nil {
				t.Fatal(err)
			}
			if err := c.Ping(ctx).Err(); err == nil {
				t.Fatal("PING succeeded through a refused link")
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("bandwidth", func(t *testing.T) {
			if err := link.Bandwidth(100); err != nil { // 100 KB/s
				t.Fatal(err)
			}
			big := strings.Repeat("x", 50_000)
			start := time.Now()
			bc := mustClient(t, topo, testbed.WithTimeout(5*time.Second))
			if err := bc.Set(ctx, "big", big, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < 300*time.Millisecond {
				t.Fatalf("50 KB at 100 KB/s took %v", el)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})
		eventually(t, 5*time.Second, "link usable after every fault was healed", func() (bool, string) {
			err := c.Ping(ctx).Err()
			return err == nil, fmt.Sprint(err)
		})
	})
}

func TestEvictionPressure(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Standalone(t, build)
		if err := topo.EvictionPressure(ctx, "n1", "4mb", "allkeys-lru"); err != nil {
			t.Fatal(err)
		}
		c := mustClient(t, topo)
		val := strings.Repeat("v", 1024)
		p := c.Pipeline()
		for i := 0; i < 10000; i++ {
			p.Set(ctx, fmt.Sprintf("k%d", i), val, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		n := topo.Node("n1").Admin().DBSize(ctx).Val()
		info := topo.Node("n1").Admin().Info(ctx, "stats").Val()
		if n >= 10000 || !strings.Contains(info, "evicted_keys:") || strings.Contains(info, "evicted_keys:0\r") {
			t.Fatalf("no eviction: %d keys remain", n)
		}
	})
}

// TestSplitBrain splits the old primary (with the test's client) from the replicas
// and sentinels: the sentinels elect a new primary while the old one keeps taking
// writes, and healing discards those writes. The harness must produce this hazard
// on purpose.
func TestSplitBrain(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, 2*time.Minute)
		topo := testbed.Replicated(t, build, 2, 3)
		old, err := topo.NodeClient("n1", testbed.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := topo.Split([]string{"n1", testbed.ClientPeer}); err != nil {
			t.Fatal(err)
		}
		var np *testbed.Node
		eventually(t, 30*time.Second, "sentinels to elect a new primary", func() (bool, string) {
			p, err := topo.Primary(ctx)
			if err != nil {
				return false, err.Error()
			}
			np = p
			return p.Name != "n1", "primary " + p.Name
		})
		if err := old.Set(ctx, "split", "written to the old primary", 0).Err(); err != nil {
			t.Fatalf("the isolated old primary refused a write: %v", err)
		}
		if err := topo.HealAll(); err != nil {
			t.Fatal(err)
		}
		// Sentinels may retry the election with another replica, so the primary
		// is asked again rather than remembered.
		eventually(t, 30*time.Second, "old primary to be demoted and resynced", func() (bool, string) {
			p, err := topo.Primary(ctx)
			if err != nil {
				return false, err.Error()
			}
			// A demoted primary closes its clients' connections (the admin one too):
			// an error here is a moment of the demotion, not a failure.
			info, err := topo.ReplicationInfo(ctx, "n1")
			if err != nil {
				return false, err.Error()
			}
			return p.Name != "n1" && info["role"] == "slave" && info["master_link_status"] == "up" &&
					info["master_port"] == strings.Split(p.Addr, ":")[1],
				fmt.Sprintf("n1: %s %s master_port %s; primary %s at %s (first elected %s)",
					info["role"], info["master_link_status"], info["master_port"], p.Name, p.Addr, np.Name)
		})
		if err := topo.WaitInSync(ctx, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, n := range topo.Nodes() {
			if n.Admin().Exists(ctx, "split").Val() != 0 {
				t.Fatalf("%s kept the split-brain write", n.Name)
			}
		}
	})
}

// TestAddStandalone: a server beside the topology (the fenced resource of the
// scenarios) has its own links, cut and healed like any other, is not among
// the data nodes, and with AOF keeps its data across kill -9 and restart.
func TestAddStandalone(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, time.Minute)
		topo := testbed.Standalone(t, build)
		res, err := topo.AddStandalone(ctx, "res", true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topo.AddStandalone(ctx, "res", true); err == nil {
			t.Fatal("a second server named res was started")
		}
		for _, n := range topo.Nodes() {
			if n.Name == "res" {
				t.Fatal("the auxiliary server is listed among the data nodes")
			}
		}
		if topo.Node("res") != res || !res.Aux {
			t.Fatal("Node does not find the auxiliary server")
		}
		c, err := topo.NodeClient("res", testbed.AsPeer("c0"), testbed.WithTimeout(300*time.Millisecond),
			testbed.WithOptions(func(o *redis.UniversalOptions) { o.MaxRetries = -1 }))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "last", "7", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// Isolating the data node leaves the resource's link alone.
		if err := topo.Isolate("n1"); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, "last").Err(); err != nil {
			t.Fatalf("isolating n1 cut c0→res: %v", err)
		}
		// So does a split that puts the client on one side (split-brain
		// scenarios split clients with the old primary).
		if err := topo.Split([]string{"n1", "c0"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, "last").Err(); err != nil {
			t.Fatalf("splitting {n1, c0} from the rest cut c0→res: %v", err)
		}
		if err := topo.Partition("c0", "res"); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, "last").Err(); err == nil {
			t.Fatal("a GET crossed the cut c0→res")
		}
		if err := topo.HealAll(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "c0→res to heal", func() (bool, string) {
			err := c.Get(ctx, "last").Err()
			return err == nil, fmt.Sprint(err)
		})
		pid := res.Pid()
		if err := topo.Restart(ctx, "res"); err != nil {
			t.Fatal(err)
		}
		if res.Pid() == pid {
			t.Fatal("restart kept the same process")
		}
		var got string
		eventually(t, 5*time.Second, "client to reconnect", func() (bool, string) {
			v, err := c.Get(ctx, "last").Result()
			got = v
			return err == nil, fmt.Sprint(err)
		})
		if got != "7" {
			t.Fatalf("the AOF resource lost its data across a restart: %q", got)
		}
	})
}
