package servertest_test

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/coordtorture/coordtorture/prim"
)

// zsetPresent: member is in the sorted set at key with a score (a deadline
// in server ms, +inf without expiry) still ahead of the server's clock.
func zsetPresent(ctx context.Context, e *env, key, member string) bool {
	score, err := e.admin.ZScore(ctx, key, member).Result()
	if err != nil {
		return false
	}
	now, _ := e.admin.Time(ctx).Result()
	return score > float64(now.UnixMilli())
}

// TestSemaphoreStateMachine is the lease machine (rapid_lease_test.go) for
// the permits of one semaphore of capacity 1 to 3: acquisitions admitted
// while fewer than the capacity are live, renewals (NoExpiry among the
// durations: a permit without expiry renewed with a ttl must get Done back),
// verifications, releases, closes, expiries, each compared with the model,
// with Done, Context and RemainingEstimate.
func TestSemaphoreStateMachine(t *testing.T) {
	rapidOnBuilds(t, 40, 20, nil, func(rt *rapid.T, e *env, co *prim.Coordinator) {
		capacity := rapid.IntRange(1, 3).Draw(rt, "capacity")
		sem := co.Semaphore(rapidKey(e, "sem"), capacity)
		runLeaseMachine(rt, t, &leaseSpec{
			kinds:    []string{"permit"},
			ttls:     rapidTTLs,
			noExpiry: true,
			verify:   true,
			acquire: func(ctx context.Context, _ string, ttl time.Duration) (rapidLease, error) {
				p, err := sem.TryAcquire(ctx, ttl)
				if err != nil {
					return nil, err
				}
				return p, nil
			},
			admits:   func(_ string, live []*leaseEntry) bool { return len(live) < capacity },
			released: ownRelease,
			expire: func(ctx context.Context, l *leaseEntry) {
				e.admin.ZRem(ctx, sem.Key(), l.h.OwnerToken())
			},
			present: func(ctx context.Context, l *leaseEntry) bool {
				return zsetPresent(ctx, e, sem.Key(), l.h.OwnerToken())
			},
		})
	})
}
