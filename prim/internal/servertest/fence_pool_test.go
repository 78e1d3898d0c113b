package servertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// TestFencedConnectionLeavesPool: a dedicated connection that prim fenced
// with CLIENT KILL never goes back to the client's pool, so the owner-checked
// release that follows the fence (and any later command of the user's) runs
// on a live connection. The proxy relays a server's close 2 s late (a loaded
// proxy or network: it happened beside two busy loops with the in-test
// proxy): go-redis's pool takes a connection for alive until its socket has
// seen the close, and reuses the one put back last. On the old code the
// killed connection went back to the pool, the release went out on it and
// met EOF, and the lease stayed on the server for its whole ttl after the
// clean-up said it was done ("owner-checked clean-up ... failed").
//
// Each row holds the request of an acquisition or renewal that fences (a
// hash-field lease, a fenced lock's renewal, a semaphore permit) so the call
// gives up at its 300 ms deadline with ErrUncertain; then the network lets
// the request through: it runs, the clean-up fences the connection and
// releases owner-checked, and nothing of the row may be left.
func TestFencedConnectionLeavesPool(t *testing.T) {
	rows := []struct {
		name  string
		needs string
		// call takes the row's lease on a healthy network (prep) and
		// returns what the stalled call is.
		prep func(ctx context.Context, t *testing.T, co *prim.Coordinator, key string) func(context.Context) error
		// left is what is left of the row on the server: 0 when nothing.
		left func(ctx context.Context, a *redis.Client, key string) (int64, error)
	}{
		{"lease-acquire", "hfe", func(ctx context.Context, t *testing.T, co *prim.Coordinator, key string) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := co.TryAcquireLease(ctx, key, "f", 3*time.Second)
				return err
			}
		}, func(ctx context.Context, a *redis.Client, key string) (int64, error) {
			return a.HLen(ctx, key).Result()
		}},
		{"fenced-lock-renew", "", func(ctx context.Context, t *testing.T, co *prim.Coordinator, key string) func(context.Context) error {
			l, err := co.TryAcquireFencedLock(ctx, key, key+":fence", 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) error {
				_, err := l.Renew(ctx, 3*time.Second)
				return err
			}
		}, func(ctx context.Context, a *redis.Client, key string) (int64, error) {
			return a.Exists(ctx, key).Result()
		}},
		{"permit-acquire", "", func(ctx context.Context, t *testing.T, co *prim.Coordinator, key string) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := co.Semaphore(key, 2).TryAcquire(ctx, 3*time.Second)
				return err
			}
		}, func(ctx context.Context, a *redis.Client, key string) (int64, error) {
			return a.ZCard(ctx, key).Result()
		}},
	}
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 2*time.Minute)
		hfe := hasFieldExpiry(ctx, e.admin)
		for _, row := range rows {
			t.Run(row.name, func(t *testing.T) {
				if row.needs == "hfe" && !hfe {
					t.Skip("the server has no hash-field expiry")
				}
				proxy := newHoldProxy(t, e.topo.Nodes()[0].DirectAddr())
				c := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's defaults
				t.Cleanup(func() { c.Close() })
				co := prim.New(c)
				t.Cleanup(func() { co.Close() })
				key := e.k("{" + row.name + "}")
				call := row.prep(ctx, t, co, key)
				proxy.DelayCloses(2 * time.Second)
				proxy.StallWhen(stallRequest, key)
				cctx, cancel := context.WithTimeout(ctx, stallDeadline)
				err := call(cctx)
				cancel()
				if !errors.Is(err, prim.ErrUncertain) {
					t.Fatalf("the stalled call answered %v, want ErrUncertain", err)
				}
				if !proxy.waitFired(stallNotice) {
					t.Fatal("nothing named the key: nothing was stalled")
				}
				proxy.ReleaseAll() // the request goes through and runs
				wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
				defer wcancel()
				if err := co.WaitCleanups(wctx); err != nil {
					t.Fatalf("clean-ups did not end within 15s of the release: %v", err)
				}
				n, err := row.left(ctx, e.admin, key)
				if err != nil || n != 0 {
					t.Errorf("%s after the clean-up: %d left (err %v), want nothing: the owner-checked release must have removed what the late request took", key, n, err)
				}
			})
		}
	})
}

// TestFenceDiscardDoesNotHoldCleanup: dropping a fenced connection from the
// pool (a PING that meets the server's close) never holds the clean-up that
// follows the fence, whatever the client's read timeout: the owner-checked
// release goes on at once, bounded by WithCleanupTimeout, and WaitCleanups
// ends with it. The client sets ReadTimeout -1 (no read deadline) so that a
// discard inside the clean-up shows as the proxy's whole 8 s close delay (the
// default options' 3 s read timeout would hide it in the clean-up bound);
// TestFencedConnectionLeavesPool covers the defaults. On the old code (the
// PING inside the fence) WaitCleanups took the 8 s.
func TestFenceDiscardDoesNotHoldCleanup(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 2*time.Minute)
		proxy := newHoldProxy(t, e.topo.Nodes()[0].DirectAddr())
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: -1})
		t.Cleanup(func() { c.Close() })
		co := prim.New(c, prim.WithCleanupTimeout(500*time.Millisecond))
		t.Cleanup(func() { co.Close() })
		key := e.k("{discard}")
		l, err := co.TryAcquireFencedLock(ctx, key, key+":fence", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		proxy.DelayCloses(8 * time.Second)
		proxy.StallWhen(stallRequest, key)
		cctx, cancel := context.WithTimeout(ctx, stallDeadline)
		_, err = l.Renew(cctx, 3*time.Second)
		cancel()
		if !errors.Is(err, prim.ErrUncertain) {
			t.Fatalf("the stalled renewal answered %v, want ErrUncertain", err)
		}
		if !proxy.waitFired(stallNotice) {
			t.Fatal("nothing named the key: nothing was stalled")
		}
		proxy.ReleaseAll()
		start := time.Now()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		if err := co.WaitCleanups(wctx); err != nil {
			t.Fatalf("clean-ups did not end within 20s of the release: %v", err)
		}
		// Fence and release, each bounded by the 500 ms clean-up timeout,
		// with what a loaded machine adds: well under the 8 s close delay.
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("the clean-up took %v after the release: it waited for the fenced connection's close", took)
		}
		if n, err := e.admin.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("%s after the clean-up: exists %d (err %v), want gone", key, n, err)
		}
	})
}
