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
			// The estimate runs ttl from before the request was sent: Done
			// closes no sooner than ttl after before, however late this
			// goroutine runs (it checked "not within 100ms" of a 300ms
			// lease, which a stall past 200ms on a loaded machine breaks).
			const ttl = 300 * time.Millisecond
			before := time.Now()
			l := acquire(ttl)
			defer l.Release(ctx)
			work, stop := l.Context(ctx)
			defer stop()
			// A user notices a second of protected work past the lease.
			if !closedWithin(l.Done(), ttl+time.Second) {
				t.Fatalf("the handle outlived its %v lease by 1s: %v", ttl, l.State())
			}
			ended := time.Since(before)
			if ended < ttl {
				t.Fatalf("ended %v after the acquisition was sent, before its %v lease: %v", ended, ttl, l.State())
			}
			if !closedWithin(work.Done(), time.Second) {
				t.Fatal("the work context outlived the handle's end by 1s")
			}
			t.Logf("ended %v after the acquisition was sent", ended.Round(time.Millisecond))
			if l.RemainingEstimate() != 0 || l.State() != prim.StateEstimateEnded {
				t.Fatalf("after the estimate: %v left, %v", l.RemainingEstimate(), l.State())
			}
			if context.Cause(work) != prim.ErrOwnershipEnded {
				t.Fatalf("cause %v", context.Cause(work))
			}
		})

		t.Run("renewals keep it open", func(t *testing.T) {
			// Renewals every 500ms of a 2s lease: a stall of 1.5s between
			// two renewals still leaves the estimate running (a 1s lease
			// every 300ms allowed 700ms, a margin CI's loaded machine
			// already outgrew once at 400ms); a user would notice 1.5s.
			l := acquire(2 * time.Second)
			defer l.Release(ctx)
			for range 5 {
				time.Sleep(500 * time.Millisecond)
				if ok, err := l.Renew(ctx, 2*time.Second); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			// 2.5s after acquisition: past the first estimate, within the renewed one.
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
