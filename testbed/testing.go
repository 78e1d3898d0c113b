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
