package servertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// TestContextDoneSendsNothing: a call whose context is already done sends
// nothing and says so with the context's error, not ErrUncertain (issue 31,
// item 5a): the caller knows the operation did not happen, and prim counts no
// uncertain outcome. Every acquisition and latch write is tried with a
// cancelled context on a fresh key; none is created, and the client sends no
// command.
func TestContextDoneSendsNothing(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, sent := e.client(t)
		co := prim.New(c)
		defer co.Close()
		hfe := hasFieldExpiry(ctx, e.admin)
		latch, err := co.CreateCountdownLatch(ctx, e.k("latch-live"), 3)
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		ops := []struct {
			name string
			keys []string
			call func(ctx context.Context) error
		}{
			{"TryAcquireFencedLock", []string{e.k("{f}:lease"), e.k("{f}:fence")}, func(ctx context.Context) error {
				_, err := co.TryAcquireFencedLock(ctx, e.k("{f}:lease"), e.k("{f}:fence"), time.Second)
				return err
			}},
			{"Semaphore.TryAcquire", []string{e.k("sem")}, func(ctx context.Context) error {
				_, err := co.Semaphore(e.k("sem"), 2).TryAcquire(ctx, time.Second)
				return err
			}},
			{"TryAcquireReadLock", []string{e.k("rw")}, func(ctx context.Context) error {
				_, err := co.TryAcquireReadLock(ctx, e.k("rw"), time.Second)
				return err
			}},
			{"TryAcquireWriteLock", []string{e.k("rw")}, func(ctx context.Context) error {
				_, err := co.TryAcquireWriteLock(ctx, e.k("rw"), time.Second)
				return err
			}},
			{"CreateCountdownLatch", []string{e.k("latch")}, func(ctx context.Context) error {
				_, err := co.CreateCountdownLatch(ctx, e.k("latch"), 2)
				return err
			}},
			{"ResetCountdownLatch", []string{e.k("latch")}, func(ctx context.Context) error {
				_, err := co.ResetCountdownLatch(ctx, e.k("latch"), 2)
				return err
			}},
			{"CountDown", nil, func(ctx context.Context) error {
				_, err := latch.CountDown(ctx)
				return err
			}},
		}
		if hfe {
			ops = append(ops, struct {
				name string
				keys []string
				call func(ctx context.Context) error
			}{"TryAcquireLease", []string{e.k("leases")}, func(ctx context.Context) error {
				_, err := co.TryAcquireLease(ctx, e.k("leases"), "w", time.Second)
				return err
			}})
		}
		for _, op := range ops {
			before := sent.get()
			err := op.call(done)
			if !errors.Is(err, context.Canceled) || errors.Is(err, prim.ErrUncertain) {
				t.Errorf("%s with a cancelled context: %v; want the context's error, not ErrUncertain", op.name, err)
			}
			if n := sent.get() - before; n != 0 {
				t.Errorf("%s with a cancelled context sent %d commands", op.name, n)
			}
			for _, k := range op.keys {
				if n, err := e.admin.Exists(ctx, k).Result(); err != nil || n != 0 {
					t.Errorf("%s with a cancelled context: key %s exists (%d, %v)", op.name, k, n, err)
				}
			}
		}
		if n, err := latch.Count(ctx); err != nil || n != 3 {
			t.Errorf("the live latch's count after a cancelled CountDown: %d %v, want 3", n, err)
		}
	})
}

// TestRedlockTTLWithinDrift: a Redlock ttl at or below its drift allowance
// (2 ms + 1%) leaves no validity whatever the round trip: TryAcquire and
// Renew refuse it as an input error before sending anything (issue 31, item
// 5c), and a held lease is untouched by the refused renewal.
func TestRedlockTTLWithinDrift(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, time.Minute)
		// loadedNodeTimeout: the rule here is the ttl check, not the node
		// timeout (a healthy node slower than 100 ms under load).
		g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))
		key := e.k("rl")
		for _, ttl := range []time.Duration{time.Millisecond, 2 * time.Millisecond} {
			_, err := g.TryAcquire(ctx, key, ttl)
			if !errors.Is(err, prim.ErrInvalidTTL) || !errors.Is(err, prim.ErrInvalidArgument) {
				t.Fatalf("TryAcquire for %v: %v, want ErrInvalidTTL", ttl, err)
			}
			for i := range 3 {
				if n, err := e.admin(i).Exists(ctx, key).Result(); err != nil || n != 0 {
					t.Fatalf("TryAcquire for %v wrote %s on r%d (%d, %v)", ttl, key, i+1, n, err)
				}
			}
		}
		l, err := g.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := l.Renew(ctx, 2*time.Millisecond); ok || !errors.Is(err, prim.ErrInvalidTTL) {
			t.Fatalf("Renew for 2ms: %v %v, want ErrInvalidTTL", ok, err)
		}
		select {
		case <-l.Done():
			t.Fatal("a refused renewal ended the lease")
		default:
		}
		if ok, err := l.Release(ctx); !ok || err != nil {
			t.Fatalf("release after the refused renewal: %v %v", ok, err)
		}
	})
}
