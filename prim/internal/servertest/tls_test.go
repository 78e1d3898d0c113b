package servertest_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// prim's fenced lock over TLS-only servers (testbed.WithTLS: replication, the
// sentinels' links and the cluster bus over TLS too, so the Sentinel and
// Cluster topologies come up only when those links work): acquire, renew,
// release and a waiting acquisition woken by the release (its watcher's
// dedicated connections are TLS too), on standalone with go-redis's own TLS
// dialer (default options plus TLSConfig, straight to the server), and on
// Sentinel (a failover client) and Cluster with the testbed's clients through
// the proxies (default options plus the TLS configuration). The three
// topologies of a build start in parallel: most of their start-up is waiting.
func TestFencedLockOverTLS(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			t.Run("standalone", func(t *testing.T) {
				t.Parallel()
				topo := testbed.Standalone(t, b, testbed.WithTLS())
				c := redis.NewClient(&redis.Options{Addr: topo.Node("n1").DirectAddr(), TLSConfig: topo.TLSConfig()})
				defer c.Close()
				fencedLockRound(t, c)
			})
			t.Run("sentinel", func(t *testing.T) {
				t.Parallel()
				topo := testbed.Replicated(t, b, 1, 3, testbed.WithTLS())
				c, err := topo.Client()
				if err != nil {
					t.Fatal(err)
				}
				fencedLockRound(t, c)
			})
			t.Run("cluster", func(t *testing.T) {
				t.Parallel()
				c, err := testbed.Cluster(t, b, 3, 0, testbed.WithTLS()).Client()
				if err != nil {
					t.Fatal(err)
				}
				fencedLockRound(t, c)
			})
		})
	}
}

// fencedLockRound acquires, renews and releases a fenced lock on c, then
// hands it to a waiting acquisition.
func fencedLockRound(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	// The watcher's dedicated connections (tracking, Pub/Sub) must work over
	// TLS too: a waiter would still be handed the lock by the 50ms re-checks
	// without them, so the test reads the log for their failure.
	var logs bytes.Buffer
	var logMu sync.Mutex
	co := prim.New(c, prim.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	defer co.Close()
	defer func() {
		logMu.Lock()
		defer logMu.Unlock()
		for _, bad := range []string{"subscription failed", "subscription refused", "invalidations unavailable", "level=WARN", "level=ERROR"} {
			if strings.Contains(logs.String(), bad) {
				t.Errorf("prim logged %q over TLS:\n%s", bad, logs.String())
			}
		}
	}()
	lease, fence := "{tls}:lease", "{tls}:fence"
	l, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Renew(ctx, 30*time.Second); !ok || err != nil {
		t.Fatalf("renew: %v %v", ok, err)
	}
	type result struct {
		l   *prim.FencedLock
		err error
	}
	got := make(chan result, 1)
	go func() {
		w, err := co.AcquireFencedLock(ctx, lease, fence, 10*time.Second)
		got <- result{w, err}
	}()
	time.Sleep(200 * time.Millisecond) // the waiter is registered and asleep
	released := time.Now()
	if r, err := l.Release(ctx); r != prim.Released || err != nil {
		t.Fatalf("release: %v %v", r, err)
	}
	// Woken by the release's invalidation, not by the 30s lease running out: a
	// user would notice seconds.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiting acquisition: %v", r.err)
		}
		if r.l.FencingToken() != l.FencingToken()+1 {
			t.Fatalf("the waiter's token %d after %d", r.l.FencingToken(), l.FencingToken())
		}
		t.Logf("hand-off in %v", time.Since(released).Round(time.Millisecond))
		if r, err := r.l.Release(ctx); r != prim.Released || err != nil {
			t.Fatalf("the waiter's release: %v %v", r, err)
		}
	case <-wctx.Done():
		t.Fatal("the waiting acquisition was not woken within 5s of the release")
	}
}
