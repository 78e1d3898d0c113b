package testbed

import (
	"context"
	"testing"
)

// The helpers below start a topology for a test, fail the test (never skip) when
// it cannot start, attach every server's log tail when the test fails, and stop
// everything at the end of the test.

// Standalone starts one server of the named build for a test.
func Standalone(t testing.TB, build string, opts ...Option) *Topology {
	t.Helper()
	return forTest(t, func(ctx context.Context) (*Topology, error) {
		return NewStandalone(ctx, build, append([]Option{WithLogf(t.Logf)}, opts...)...)
	})
}

// Replicated starts a primary, replicas and sentinels for a test.
func Replicated(t testing.TB, build string, replicas, sentinels int, opts ...Option) *Topology {
	t.Helper()
	return forTest(t, func(ctx context.Context) (*Topology, error) {
		return NewReplicated(ctx, build, replicas, sentinels, append([]Option{WithLogf(t.Logf)}, opts...)...)
	})
}

// Cluster starts a Redis Cluster for a test.
func Cluster(t testing.TB, build string, primaries, replicasPerPrimary int, opts ...Option) *Topology {
	t.Helper()
	return forTest(t, func(ctx context.Context) (*Topology, error) {
		return NewCluster(ctx, build, primaries, replicasPerPrimary, append([]Option{WithLogf(t.Logf)}, opts...)...)
	})
}

// IndependentSet starts n unrelated servers for a test.
func IndependentSet(t testing.TB, build string, n int, opts ...Option) *Topology {
	t.Helper()
	return forTest(t, func(ctx context.Context) (*Topology, error) {
		return NewIndependentSet(ctx, build, n, append([]Option{WithLogf(t.Logf)}, opts...)...)
	})
}

func forTest(t testing.TB, start func(context.Context) (*Topology, error)) *Topology {
	t.Helper()
	topo, err := start(context.Background())
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server logs of the failed test:\n%s", topo.Logs(40))
		}
		if err := topo.Close(); err != nil {
			t.Errorf("testbed: close: %v", err)
		}
	})
	return topo
}

// DataUser creates ACL user name (password pass, every key, channel and
// command) on the data nodes of a replicated topology only: the sentinels do
// not know it, as in a deployment whose sentinels keep their own users. It
// returns the sentinels' addresses.
func DataUser(t testing.TB, topo *Topology, name, pass string) []string {
	t.Helper()
	ctx := context.Background()
	for _, n := range topo.Nodes() {
		if err := n.Admin().Do(ctx, "ACL", "SETUSER", name, "reset", "on", ">"+pass, "~*", "&*", "+@all").Err(); err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
	}
	var addrs []string
	for _, s := range topo.Sentinels() {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// RequireSentinelPassword gives the sentinels' default user password pass
// (AUTH pass, or go-redis's SentinelPassword), until the end of the test. The
// testbed's admin connections, authenticated before, keep working.
func RequireSentinelPassword(t testing.TB, topo *Topology, pass string) {
	t.Helper()
	for _, s := range topo.Sentinels() {
		if err := s.Admin().Do(context.Background(), "ACL", "SETUSER", "default", "resetpass", ">"+pass).Err(); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range topo.Sentinels() {
			_ = s.Admin().Do(context.Background(), "ACL", "SETUSER", "default", "nopass").Err()
		}
	})
}
