package servertest_test

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/coordtorture/coordtorture/prim"
)

// TestHashLeaseStateMachine is the lease machine (rapid_lease_test.go) for
// two named leases (fields) of one hash: an acquisition admitted while its
// field has no live owner, whatever the other field; renewals longer and
// shorter, verifications, releases (NotOwned for a field another owner holds
// now), closes, expiries, with Done, Context and RemainingEstimate. Skipped
// on builds without hash-field expiry.
func TestHashLeaseStateMachine(t *testing.T) {
	noHFE := func(e *env) string {
		if !hasFieldExpiry(context.Background(), e.admin) {
			return "no hash-field expiry on this server: hash leases need Redis 7.4+ or Valkey 9+"
		}
		return ""
	}
	rapidOnBuilds(t, 40, 20, noHFE, func(rt *rapid.T, e *env, co *prim.Coordinator) {
		hash := rapidKey(e, "hl")
		runLeaseMachine(rt, t, &leaseSpec{
			kinds:  []string{"f1", "f2"},
			ttls:   rapidTTLs,
			verify: true,
			acquire: func(ctx context.Context, field string, ttl time.Duration) (rapidLease, error) {
				l, err := co.TryAcquireLease(ctx, hash, field, ttl)
				if err != nil {
					return nil, err
				}
				return l, nil
			},
			admits: admitsField,
			released: func(l *leaseEntry, live []*leaseEntry) prim.ReleaseResult {
				if !l.live && !admitsField(l.kind, live) {
					return prim.NotOwned // another owner holds the field now
				}
				return ownRelease(l, live)
			},
			expire: func(ctx context.Context, l *leaseEntry) {
				e.admin.HDel(ctx, hash, l.kind)
			},
			present: func(ctx context.Context, l *leaseEntry) bool {
				return e.admin.HGet(ctx, hash, l.kind).Val() == l.h.OwnerToken()
			},
		})
	})
}

// admitsField: a field's lease is admitted while no live owner holds it.
func admitsField(field string, live []*leaseEntry) bool {
	for _, l := range live {
		if l.kind == field {
			return false
		}
	}
	return true
}
