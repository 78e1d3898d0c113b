package servertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// TestWaitsBoundedOnStalledConnections: every wait honours its context and
// Close is prompt, whatever the client's options (issue 31, item 3). With
// go-redis's defaults a command written on a connection that then goes
// silent waits for the read timeout (3 s), whatever the context says; the
// watcher's tracking read held its mutex for that long, so a latch Wait, an
// AcquireFencedLock and an AcquireLease with a 300 ms deadline returned
// after seconds, and Coordinator.Close blocked behind it. Here waiters are
// set up (the watcher's tracking connection made), then this client's link
// goes silent both ways: each call must return within 1.5 s of its 300 ms
// deadline (what a user would notice as "ignored my deadline"), and Close
// within 1.5 s.
func TestWaitsBoundedOnStalledConnections(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = link.Heal() })
		co := prim.New(c)
		other, _ := e.client(t)
		owner := prim.New(other)
		defer owner.Close()
		lease, fence := e.k("{s}:lease"), e.k("{s}:fence")
		held, err := owner.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		if _, err := owner.CreateCountdownLatch(ctx, e.k("latch"), 1); err != nil {
			t.Fatal(err)
		}
		joined, err := co.JoinCountdownLatch(ctx, e.k("latch"))
		if err != nil {
			t.Fatal(err)
		}
		// A waiter that sets up the watcher and its tracking connection.
		wctx, wcancel := context.WithTimeout(ctx, 700*time.Millisecond)
		if _, err := co.AcquireFencedLock(wctx, lease, fence, 30*time.Second); err == nil {
			t.Fatal("acquired a held lock")
		}
		wcancel()
		if err := link.Partition(); err != nil {
			t.Fatal(err)
		}
		const deadline, notice = 300 * time.Millisecond, 1500 * time.Millisecond
		calls := []struct {
			name string
			call func(ctx context.Context) error
		}{
			{"AcquireFencedLock", func(ctx context.Context) error {
				_, err := co.AcquireFencedLock(ctx, lease, fence, 30*time.Second)
				return err
			}},
			{"latch Wait", func(ctx context.Context) error {
				_, err := joined.Wait(ctx)
				return err
			}},
			{"AcquireFencedLock again", func(ctx context.Context) error {
				_, err := co.AcquireFencedLock(ctx, lease, fence, 30*time.Second)
				return err
			}},
		}
		for _, cl := range calls {
			cctx, cancel := context.WithTimeout(ctx, deadline)
			start := time.Now()
			err := cl.call(cctx)
			took := time.Since(start)
			cancel()
			if err == nil {
				t.Fatalf("%s succeeded over a silent link", cl.name)
			}
			if took > deadline+notice {
				t.Errorf("%s with a %v deadline over a silent link returned after %v", cl.name, deadline, took)
			}
		}
		start := time.Now()
		co.Close()
		if took := time.Since(start); took > notice {
			t.Errorf("Coordinator.Close over a silent link took %v", took)
		}
	})
}
