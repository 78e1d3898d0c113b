package servertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestOwnershipEnds: Done (and the Context derived from it) ends exactly when
// the handle stops holding: the estimate ran out, Redis said lost, release, an
// uncertain outcome — and not while renewals keep the estimate ahead.
func TestOwnershipEnds(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		lease, fence := e.k("{o}:lease"), e.k("{o}:fence")
		acquire := func(ttl time.Duration) *prim.FencedLock {
			t.Helper()
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}

		t.Run("estimate runs out", func(t *testing.T) {
			l := acquire(300 * time.Millisecond)
			defer l.Release(ctx)
			work, stop := l.Context(ctx)
			defer stop()
			if closedWithin(l.Done(), 100*time.Millisecond) || l.State() != prim.StateHeld {
				t.Fatalf("ended early: %v", l.State())
			}
			start := time.Now()
			// A user notices a second of protected work past the lease.
			if !closedWithin(work.Done(), time.Second) {
				t.Fatal("the work context outlived the lease estimate by 1s")
			}
			t.Logf("ended %v after the check at 100ms", time.Since(start).Round(time.Millisecond))
			if l.RemainingEstimate() != 0 || l.State() != prim.StateEstimateEnded {
				t.Fatalf("after the estimate: %v left, %v", l.RemainingEstimate(), l.State())
			}
			if context.Cause(work) != prim.ErrOwnershipEnded {
				t.Fatalf("cause %v", context.Cause(work))
			}
		})

		t.Run("renewals keep it open", func(t *testing.T) {
			// Renewals every 300ms of a 1s lease: a stall of 700ms on CI's
			// loaded machine still leaves the estimate running (400ms did
			// not: the estimate ran out between two renewals there).
			l := acquire(time.Second)
			defer l.Release(ctx)
			for range 5 {
				time.Sleep(300 * time.Millisecond)
				if ok, err := l.Renew(ctx, time.Second); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			// 1.5s after acquisition: past the first estimate, within the renewed one.
			if closedWithin(l.Done(), 0) || l.State() != prim.StateHeld {
				t.Fatalf("renewed handle ended: %v", l.State())
			}
		})

		t.Run("lost", func(t *testing.T) {
			l := acquire(10 * time.Second)
			e.admin.Del(ctx, lease)
			if ok, err := l.Renew(ctx, 10*time.Second); ok || err != nil {
				t.Fatal(ok, err)
			}
			if !closedWithin(l.Done(), 0) || l.State() != prim.StateLost {
				t.Fatalf("lost handle: done not closed or state %v", l.State())
			}
		})

		t.Run("released", func(t *testing.T) {
			l := acquire(10 * time.Second)
			work, stop := l.Context(ctx)
			defer stop()
			if r, err := l.Release(ctx); r != prim.Released || err != nil {
				t.Fatal(r, err)
			}
			if !closedWithin(work.Done(), time.Second) || l.State() != prim.StateReleased {
				t.Fatalf("released handle: work context not cancelled or state %v", l.State())
			}
		})

		t.Run("stop releases the goroutine", func(t *testing.T) {
			l := acquire(10 * time.Second)
			defer l.Release(ctx)
			work, stop := l.Context(ctx)
			stop()
			if context.Cause(work) == prim.ErrOwnershipEnded || closedWithin(l.Done(), 0) {
				t.Fatal("stopping the work context ended the ownership")
			}
		})
	})
}
