package servertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// heldLease is what every handle with a deadline has in common.
type heldLease interface {
	Renew(ctx context.Context, ttl time.Duration) (bool, error)
	Done() <-chan struct{}
	Context(parent context.Context) (context.Context, context.CancelFunc)
	RemainingEstimate() time.Duration
}

// shortRenewal is the renewal's ttl in TestDoneFollowsShorterRenewal: a lease
// taken for 20 s (or without expiry) renewed for this is gone on the server
// this long after the renewal.
const shortRenewal = 400 * time.Millisecond

// doneAfterShorterRenewal renews l, taken for far longer than shortRenewal,
// for shortRenewal, and requires Done and a Context taken before the renewal
// to end by the time a user would notice a lease kept past its end: 3 s after
// the renewal, while the old deadline is 20 s (or 100 years) away. A done
// timer that keeps the old deadline leaves them open while the key is gone
// and another owner can be admitted.
func doneAfterShorterRenewal(t *testing.T, ctx context.Context, what string, l heldLease) {
	t.Helper()
	work, cancel := l.Context(ctx)
	defer cancel()
	done := l.Done()
	renewed := time.Now() // the new deadline runs from when the renewal was sent
	if ok, err := l.Renew(ctx, shortRenewal); !ok || err != nil {
		t.Fatalf("%s: renew for %v: %v %v", what, shortRenewal, ok, err)
	}
	if left := l.RemainingEstimate(); left > shortRenewal {
		t.Fatalf("%s: RemainingEstimate %v after a renewal for %v", what, left, shortRenewal)
	}
	const bound = 3 * time.Second
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("%s: Done still open %v after a renewal for %v (the old deadline was kept)", what, bound, shortRenewal)
	}
	if waited := time.Since(renewed); waited < shortRenewal/2 {
		t.Fatalf("%s: Done closed %v after a renewal for %v: too early", what, waited, shortRenewal)
	}
	select {
	case <-work.Done():
	case <-time.After(time.Second):
		t.Fatalf("%s: the lease's Context is still live after Done closed", what)
	}
}

// TestDoneFollowsShorterRenewal: Done and Context follow every change of the
// deadline, a shorter one too (issue 31, item 1): a fenced lock, a hash-field
// lease, read and write leases and a Redlock lease taken for 20 s, and a
// semaphore permit taken without expiry, each renewed for 400 ms, end within
// seconds, not at the old deadline.
func TestDoneFollowsShorterRenewal(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		const long = 20 * time.Second

		l, err := co.TryAcquireFencedLock(ctx, e.k("{d}:lease"), e.k("{d}:fence"), long)
		if err != nil {
			t.Fatal(err)
		}
		doneAfterShorterRenewal(t, ctx, "fenced lock", l)

		if hasFieldExpiry(ctx, e.admin) {
			hl, err := co.TryAcquireLease(ctx, e.k("leases"), "w1", long)
			if err != nil {
				t.Fatal(err)
			}
			doneAfterShorterRenewal(t, ctx, "hash lease", hl)
		}

		r, err := co.TryAcquireReadLock(ctx, e.k("rw"), long)
		if err != nil {
			t.Fatal(err)
		}
		doneAfterShorterRenewal(t, ctx, "read lease", r)
		w, err := co.TryAcquireWriteLock(ctx, e.k("rw2"), long)
		if err != nil {
			t.Fatal(err)
		}
		doneAfterShorterRenewal(t, ctx, "write lease", w)

		p, err := co.Semaphore(e.k("sem"), 2).TryAcquire(ctx, prim.NoExpiry)
		if err != nil {
			t.Fatal(err)
		}
		doneAfterShorterRenewal(t, ctx, "semaphore permit without expiry", p)
		p2, err := co.Semaphore(e.k("sem2"), 2).TryAcquire(ctx, long)
		if err != nil {
			t.Fatal(err)
		}
		doneAfterShorterRenewal(t, ctx, "semaphore permit", p2)
	})
}

// TestRedlockDoneFollowsShorterRenewal is TestDoneFollowsShorterRenewal for a
// Redlock lease on three independent nodes.
func TestRedlockDoneFollowsShorterRenewal(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, time.Minute)
		// loadedNodeTimeout: the rule here is the Done timer, not the node
		// timeout; a healthy node slower than 100 ms on a loaded machine
		// would fail the acquisition.
		g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))
		l, err := g.TryAcquire(ctx, e.k("rl"), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		doneAfterShorterRenewal(t, ctx, "redlock lease", l)
	})
}
