package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The hash-lease family: named leases as fields of one hash (Redis 7.4+,
// Valkey 9+). Clients contend for a few fields, hold, renew once and release;
// exclusion is checked per (hash, field).

const leaseHash = "leases"

// leasePlan is what one client does with a lease it holds: how long it waits
// before renewing and before releasing, and whether it waits for the field
// (AcquireLease) or tries once (TryAcquireLease).
type leasePlan struct {
	wait          func(r *rand.Rand, proc int) bool
	beforeRenew   func(r *rand.Rand, ttl time.Duration) time.Duration
	beforeRelease func(r *rand.Rand, ttl time.Duration) time.Duration
}

func upToQuarter(r *rand.Rand, ttl time.Duration) time.Duration {
	return time.Duration(r.Int64N(int64(ttl/4) + 1))
}

var leaseWorkload = leaseWorkloadWith(leasePlan{beforeRenew: upToQuarter, beforeRelease: upToQuarter})

func leaseWorkloadWith(plan leasePlan) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		r := env.Rand(proc)
		co := env.coordinator(proc)
		rec := env.Rec
		ttlMs := env.TTL.Milliseconds()
		for ctx.Err() == nil {
			// Every decision of this attempt is drawn first, whatever its
			// outcome: the k-th attempt of a process is the same for a seed.
			field := fmt.Sprintf("worker:%d", r.IntN(3))
			wait := plan.wait != nil && plan.wait(r, proc)
			backoff := time.Duration(1+r.IntN(5)) * time.Millisecond
			holdRenew, holdRelease := plan.beforeRenew(r, env.TTL), plan.beforeRelease(r, env.TTL)
			f := history.FAcquire
			if wait {
				f = history.FAcquireWait
			}
			if _, err := rec.Invoke(proc, history.Op{F: f, Key: leaseHash, Field: field, TTLMs: ttlMs}); err != nil {
				return
			}
			var l *prim.Lease
			var err error
			if wait {
				actx, cancel := context.WithTimeout(ctx, 10*env.TTL)
				l, err = co.AcquireLease(actx, env.Key(leaseHash), field, env.TTL)
				cancel()
			} else {
				l, err = co.TryAcquireLease(ctx, env.Key(leaseHash), field, env.TTL)
			}
			switch {
			case err == nil:
				rec.OK(proc, history.Op{Owner: l.OwnerToken(), TTLMs: ttlMs})
			case errors.Is(err, prim.ErrNotAcquired):
				rec.Fail(proc, history.Op{})
				sleep(ctx, backoff)
				continue
			case errors.Is(err, prim.ErrFeatureUnsupported):
				rec.Fail(proc, history.Op{Err: err.Error()})
				return // an old server: the scenario's history shows the refusal
			case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, prim.ErrUncertain):
				rec.Fail(proc, history.Op{Err: err.Error()}) // the wait ended before the script was sent
				continue
			default:
				env.failed(proc, err)
				sleep(ctx, 10*time.Millisecond)
				continue
			}
			sleep(ctx, holdRenew)
			rec.Invoke(proc, history.Op{F: history.FRenew, Key: leaseHash, Field: field, Owner: l.OwnerToken(), TTLMs: ttlMs})
			ok, err := l.Renew(ctx, env.TTL)
			switch {
			case err != nil:
				env.failed(proc, err)
			case ok:
				rec.OK(proc, history.Op{})
			default:
				rec.Fail(proc, history.Op{})
			}
			sleep(ctx, holdRelease)
			env.release(ctx, proc, history.Op{Key: leaseHash, Field: field, Owner: l.OwnerToken()},
				func(ctx context.Context) (string, error) { return primRelease(ctx, l.Release) })
		}
	}
}

// readRefusedUntouched reads, on every node after old-server's run, whether
// the lease hash exists (EXISTS's reply): the refused-untouched checker
// judges it with the history's refusals (models.CheckRefusedUntouched).
func readRefusedUntouched(ctx context.Context, env *Env, _ *history.History) []history.ServerRead {
	if env.Topo == nil {
		return []history.ServerRead{{Key: leaseHash, Err: "an external deployment: the harness does not read servers it did not start"}}
	}
	var out []history.ServerRead
	for _, n := range env.Topo.Nodes() {
		rd := history.ServerRead{Node: n.Name, Key: leaseHash}
		if k, err := n.Admin().Exists(ctx, env.Key(leaseHash)).Result(); err != nil {
			rd.Err = err.Error()
		} else {
			rd.Reply = strconv.FormatInt(k, 10)
		}
		out = append(out, rd)
	}
	return out
}

func init() {
	props := []Property{{Checker: "exclusion"}, {Checker: "lease-protocol"}}
	drift := models.Options{Drift: 20 * time.Millisecond}
	standalone := Topology{Kind: testbed.KindStandalone}
	Register(&Scenario{
		Name:       "hash-lease/baseline",
		Summary:    "clients contend for three named leases in one hash, renew and release; no faults. Exclusion per field must hold.",
		Topo:       standalone,
		Workload:   leaseWorkload,
		Properties: props, Check: drift, Impls: []string{"prim"}, Requires: []Feature{HashFieldExpiry},
	})
	Register(&Scenario{
		Name: "hash-lease/partition",
		Summary: "clients are cut off from the server and healed; acquisitions and renewals become uncertain and are " +
			"fenced with CLIENT KILL. Exclusion per field must hold.",
		Topo:     standalone,
		Workload: leaseWorkload,
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return partitionClients(r, d, 1500*time.Millisecond, 500*time.Millisecond)
		},
		Properties: props, Check: drift, Impls: []string{"prim"}, Requires: []Feature{HashFieldExpiry},
	})
	Register(&Scenario{
		Name: "hash-lease/expiry-race",
		Summary: "holders renew within a few milliseconds of their field's expiry (before or after it) while half the " +
			"clients wait for the field (AcquireLease: invalidations plus the HPTTL deadline): a renewal that loses " +
			"the race must fail and never extend the next owner's field. Exclusion and liveness must hold.",
		Topo: standalone,
		Workload: leaseWorkloadWith(leasePlan{
			wait: func(_ *rand.Rand, proc int) bool { return proc%2 == 1 },
			beforeRenew: func(r *rand.Rand, ttl time.Duration) time.Duration {
				return ttl - 4*time.Millisecond + time.Duration(r.Int64N(int64(8*time.Millisecond)))
			},
			beforeRelease: func(r *rand.Rand, ttl time.Duration) time.Duration {
				return time.Duration(r.IntN(3)) * time.Millisecond
			},
		}),
		Properties: []Property{{Checker: "exclusion"}, {Checker: "lease-protocol"}, {Checker: "liveness"}},
		Check:      models.Options{Drift: 20 * time.Millisecond, WakeBound: 500 * time.Millisecond},
		Impls:      []string{"prim"},
		Requires:   []Feature{HashFieldExpiry},
	})
	Register(&Scenario{
		Name: "hash-lease/old-server",
		Summary: "named leases on a server without hash-field expiry (redis-7.0, whatever --server says): every " +
			"acquisition must be refused with an error naming the feature and the versions that have it, and nothing written.",
		Topo:       Topology{Kind: testbed.KindStandalone, Build: "redis-7.0"},
		Workload:   leaseWorkload,
		Properties: []Property{{Checker: "refused-untouched"}},
		Reads:      map[string]Read{"refused-untouched": readRefusedUntouched},
		NoProgress: true,
		Impls:      []string{"prim"},
	})
}
