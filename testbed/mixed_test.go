package testbed_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// TestWithNodeBuildBadInput: WithNodeBuild outside a replicated topology, for a
// node the topology does not have, or naming an unknown build is refused with
// a typed error before any server starts.
func TestWithNodeBuildBadInput(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	cases := []struct {
		name string
		new  func() (*testbed.Topology, error)
		want error
		text string
	}{
		{"standalone", func() (*testbed.Topology, error) {
			return testbed.NewStandalone(ctx, "", testbed.WithNodeBuild("n1", testbed.DefaultBuild))
		}, testbed.ErrBadOption, "not standalone"},
		{"cluster", func() (*testbed.Topology, error) {
			return testbed.NewCluster(ctx, "", 3, 0, testbed.WithNodeBuild("n1", testbed.DefaultBuild))
		}, testbed.ErrBadOption, "not cluster"},
		{"no such node", func() (*testbed.Topology, error) {
			return testbed.NewReplicated(ctx, "", 1, 0, testbed.WithNodeBuild("n3", testbed.DefaultBuild))
		}, testbed.ErrBadOption, `no node "n3"`},
		{"no such sentinel", func() (*testbed.Topology, error) {
			return testbed.NewReplicated(ctx, "", 1, 0, testbed.WithNodeBuild("s1", testbed.DefaultBuild))
		}, testbed.ErrBadOption, `no node "s1"`},
		{"unknown build", func() (*testbed.Topology, error) {
			return testbed.NewReplicated(ctx, "", 1, 0, testbed.WithNodeBuild("n2", "redis-9.9"))
		}, testbed.ErrUnknownBuild, `"redis-9.9"`},
		{"node config, standalone", func() (*testbed.Topology, error) {
			return testbed.NewStandalone(ctx, "", testbed.WithNodeConfig("n1", "maxclients 100"))
		}, testbed.ErrBadOption, "not standalone"},
		{"node config, no such node", func() (*testbed.Topology, error) {
			return testbed.NewReplicated(ctx, "", 1, 0, testbed.WithNodeConfig("n3", "maxclients 100"))
		}, testbed.ErrBadOption, `no data node "n3"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			topo, err := c.new()
			if topo != nil {
				topo.Close()
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("got %v, want %v containing %q", err, c.want, c.text)
			}
			// Refused before any server started (a start takes far longer).
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("refused after %v: something was started first", d)
			}
		})
	}
}

// needBuilds skips a mixed-version test unless every build it needs is in the
// matrix this run tests (COORDTORTURE_SERVERS); a build in the matrix but not
// fetched fails it, as forEachBuild does.
func needBuilds(t *testing.T, builds ...string) {
	t.Helper()
	m := testbed.Matrix()
	for _, b := range builds {
		if !slices.Contains(m, b) {
			t.Skipf("needs %s in the matrix (this run's: %s)", strings.Join(builds, " and "), strings.Join(m, ","))
		}
	}
	for _, b := range builds {
		if _, err := testbed.LookupBuild(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMixedVersionSentinelFailover: a replicated topology whose primary runs
// redis-8.0 and whose replica runs redis-8.6 (WithNodeBuild) replicates, and a
// Sentinel failover promotes the 8.6 replica: clients of the Sentinel client
// then reach a server that has DELEX, which the old primary did not know. The
// old primary, which the sentinels turn into a replica of the new one, cannot
// load its snapshot (replication goes from older builds to newer only).
func TestMixedVersionSentinelFailover(t *testing.T) {
	needBuilds(t, "redis-8.0", "redis-8.6")
	ctx := ctxT(t, 3*time.Minute)
	topo := testbed.Replicated(t, "redis-8.0", 1, 3, testbed.WithNodeBuild("n2", "redis-8.6"))
	for node, want := range map[string]string{"n1": "8.0.", "n2": "8.6.", "s1": "8.0."} {
		n := topo.Node(node)
		info, err := n.Admin().Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		if v := infoLine(info, "redis_version"); !strings.HasPrefix(v, want) {
			t.Fatalf("%s (Build %s) reports redis_version %q, want %s*", node, n.Build.Name, v, want)
		}
	}
	if topo.Node("n2").Build.Name != "redis-8.6" || topo.Node("n1").Build.Name != "redis-8.0" || topo.Build.Name != "redis-8.0" {
		t.Fatalf("builds: topology %s, n1 %s, n2 %s", topo.Build.Name, topo.Node("n1").Build.Name, topo.Node("n2").Build.Name)
	}

	c := mustClient(t, topo)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "DELEX", "k", "IFEQ", "v").Err(); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("DELEX on the 8.0 primary: %v, want unknown command", err)
	}
	if err := topo.WaitInSync(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := topo.Node("n2").Admin().Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("the 8.6 replica has k = %q, %v: replication from 8.0 did not reach it", got, err)
	}

	np, err := topo.FailoverSentinel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if np.Name != "n2" || np.Build.Name != "redis-8.6" {
		t.Fatalf("new primary %s (%s), want n2 (redis-8.6)", np.Name, np.Build.Name)
	}
	// The Sentinel client follows the failover to the 8.6 primary.
	eventually(t, time.Minute, "DELEX through the Sentinel client on the new primary", func() (bool, string) {
		n, err := c.Do(ctx, "DELEX", "k", "IFEQ", "v").Int()
		return err == nil && n == 1, "DELEX k IFEQ v: " + errString(err)
	})

	// The old primary is told to replicate from n2 and cannot load its snapshot.
	eventually(t, time.Minute, "the 8.0 node to log that it cannot load the 8.6 snapshot", func() (bool, string) {
		tail := topo.Node("n1").LogTail(200)
		return strings.Contains(tail, "Can't handle RDB format version"), tail
	})
}

// TestMixedVersionNewerToOlder: an older replica of a newer primary never comes
// up: NewReplicated fails with ErrIncompatibleReplica quoting the replica's log.
func TestMixedVersionNewerToOlder(t *testing.T) {
	needBuilds(t, "redis-8.0", "redis-8.6")
	ctx := ctxT(t, 2*time.Minute)
	topo, err := testbed.NewReplicated(ctx, "redis-8.6", 1, 0, testbed.WithNodeBuild("n2", "redis-8.0"),
		testbed.WithStartTimeout(20*time.Second), testbed.WithLogf(t.Logf))
	if err == nil {
		topo.Close()
		t.Fatal("a redis-8.0 replica of a redis-8.6 primary came up")
	}
	if !errors.Is(err, testbed.ErrIncompatibleReplica) || !strings.Contains(err.Error(), "Can't handle RDB format version") ||
		!strings.Contains(err.Error(), "n2 (redis-8.0) cannot load the snapshot of n1 (redis-8.6)") {
		t.Fatalf("got %v", err)
	}
	t.Logf("refused as expected: %s", strings.SplitN(err.Error(), "\n", 2)[0])
}

func infoLine(info, key string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+":"); ok {
			return v
		}
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
