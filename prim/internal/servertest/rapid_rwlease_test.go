package servertest_test

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/coordtorture/coordtorture/prim"
)

// TestRWLeaseStateMachine is the lease machine (rapid_lease_test.go) for the
// read and write leases of one key: a read admitted while no writer is live,
// a write while nobody is; renewals longer and shorter, verifications,
// releases, closes, expiries, with Done, Context and RemainingEstimate.
func TestRWLeaseStateMachine(t *testing.T) {
	rapidOnBuilds(t, 40, 20, nil, func(rt *rapid.T, e *env, co *prim.Coordinator) {
		key := rapidKey(e, "rw")
		runLeaseMachine(rt, t, &leaseSpec{
			kinds:  []string{"read", "write"},
			ttls:   rapidTTLs,
			verify: true,
			acquire: func(ctx context.Context, kind string, ttl time.Duration) (rapidLease, error) {
				acquire := co.TryAcquireReadLock
				if kind == "write" {
					acquire = co.TryAcquireWriteLock
				}
				l, err := acquire(ctx, key, ttl)
				if err != nil {
					return nil, err
				}
				return l, nil
			},
			admits: func(kind string, live []*leaseEntry) bool {
				for _, l := range live {
					if kind == "write" || l.kind == "write" {
						return false
					}
				}
				return true
			},
			released: ownRelease,
			expire: func(ctx context.Context, l *leaseEntry) {
				e.admin.ZRem(ctx, key, l.h.OwnerToken())
			},
			present: func(ctx context.Context, l *leaseEntry) bool {
				return zsetPresent(ctx, e, key, l.h.OwnerToken())
			},
		})
	})
}
