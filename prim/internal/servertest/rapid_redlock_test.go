package servertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/coordtorture/coordtorture/prim"
)

// rapidRedlock adapts a Redlock lease to the lease machine: Release's true (a
// quorum answered) is Released.
type rapidRedlock struct{ *prim.RedlockLease }

func (r rapidRedlock) Release(ctx context.Context) (prim.ReleaseResult, error) {
	ok, err := r.RedlockLease.Release(ctx)
	if !ok || err != nil {
		return prim.NotOwned, err
	}
	return prim.Released, nil
}

// TestRedlockStateMachine is the lease machine (rapid_lease_test.go) for one
// Redlock key on an independent set of three nodes: an acquisition admitted
// while no lease is live on a quorum; renewals longer and shorter (the
// estimate is ttl less the drift allowance), releases (true once a quorum
// answered, and again after), closes, expiries (the key deleted on every
// node), with Done, Context and RemainingEstimate.
func TestRedlockStateMachine(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		rapidBudget(t, rapidChecksFor(e.topo.Build.Name, 40), 20)
		// A 1 s node timeout, not the default 100 ms: a node slower than that
		// on a loaded machine would fail an acquisition the model admits; a
		// call that slow (over rapidMargin) ends the schedule's judging
		// instead.
		g := group(t, e.clients(t, 3), prim.WithNodeTimeout(time.Second))
		rapid.Check(t, func(rt *rapid.T) {
			key := e.k(fmt.Sprintf("rl%d", rapidSeq.Add(1)))
			on := func(ctx context.Context, l *leaseEntry) int {
				n := 0
				for i := range g.Nodes() {
					if e.admin(i).Get(ctx, key).Val() == l.h.OwnerToken() {
						n++
					}
				}
				return n
			}
			runLeaseMachine(rt, t, &leaseSpec{
				kinds: []string{"lease"},
				ttls:  rapidTTLs,
				acquire: func(ctx context.Context, _ string, ttl time.Duration) (rapidLease, error) {
					l, err := g.TryAcquire(ctx, key, ttl)
					if err != nil {
						return nil, err
					}
					return rapidRedlock{l}, nil
				},
				admits:        func(_ string, live []*leaseEntry) bool { return len(live) == 0 },
				released:      func(*leaseEntry, []*leaseEntry) prim.ReleaseResult { return prim.Released },
				releasedAgain: func() prim.ReleaseResult { return prim.Released },
				drift:         g.DriftAllowance,
				expire: func(ctx context.Context, _ *leaseEntry) {
					for i := range g.Nodes() {
						e.admin(i).Del(ctx, key)
					}
				},
				present: func(ctx context.Context, l *leaseEntry) bool { return on(ctx, l) >= g.Quorum() },
				settleAcquired: func(ctx context.Context, l *leaseEntry) time.Time {
					// TryAcquire returns at a quorum: the slower node's SET
					// lands just after (its window is the later one).
					for end := time.Now().Add(200 * time.Millisecond); on(ctx, l) < g.Nodes() && time.Now().Before(end); {
						time.Sleep(5 * time.Millisecond)
					}
					return time.Now()
				},
			})
		})
	})
}
