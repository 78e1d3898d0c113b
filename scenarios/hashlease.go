package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The hash-lease family: named leases as fields of one hash (Redis 7.4+,
// Valkey 9+). Clients contend for a few fields with TryAcquireLease, hold, renew
// once and release; exclusion is checked per (hash, field).

const leaseHash = "leases"

func leaseWorkload(ctx context.Context, env *Env, proc int) {
	r := env.Rand(proc)
	co := env.coordinator(proc)
	rec := env.Rec
	for ctx.Err() == nil {
		field := fmt.Sprintf("worker:%d", r.IntN(3))
		if _, err := rec.Invoke(proc, history.Op{F: history.FAcquire, Key: leaseHash, Field: field, TTLMs: env.TTL.Milliseconds()}); err != nil {
			return
		}
		l, err := co.TryAcquireLease(ctx, env.Key(leaseHash), field, env.TTL)
		switch {
		case err == nil:
			rec.OK(proc, history.Op{Owner: l.OwnerToken(), TTLMs: env.TTL.Milliseconds()})
		case errors.Is(err, prim.ErrNotAcquired):
			rec.Fail(proc, history.Op{})
			sleep(ctx, time.Duration(1+r.IntN(5))*time.Millisecond)
			continue
		case errors.Is(err, prim.ErrFeatureUnsupported):
			rec.Fail(proc, history.Op{Err: err.Error()})
			return // an old server: the scenario's history shows the refusal
		default:
			rec.Info(proc, history.Op{Err: err.Error()})
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		sleep(ctx, time.Duration(r.IntN(int(env.TTL/time.Millisecond/4)+1))*time.Millisecond)
		rec.Invoke(proc, history.Op{F: history.FRenew, Key: leaseHash, Field: field, Owner: l.OwnerToken(), TTLMs: env.TTL.Milliseconds()})
		ok, err := l.Renew(ctx, env.TTL)
		switch {
		case err != nil:
			rec.Info(proc, history.Op{Err: err.Error()})
		case ok:
			rec.OK(proc, history.Op{})
		default:
			rec.Fail(proc, history.Op{})
		}
		sleep(ctx, time.Duration(r.IntN(int(env.TTL/time.Millisecond/4)+1))*time.Millisecond)
		env.release(ctx, proc, history.Op{Key: leaseHash, Field: field, Owner: l.OwnerToken()},
			func(ctx context.Context) (string, error) { return primRelease(ctx, l.Release) })
	}
}

func init() {
	props := []Property{{Checker: "exclusion"}}
	drift := models.Options{Drift: 20 * time.Millisecond}
	Register(&Scenario{
		Name:       "hash-lease/baseline",
		Summary:    "clients contend for three named leases in one hash, renew and release; no faults. Exclusion per field must hold.",
		Topo:       Topology{Kind: testbed.KindStandalone},
		Workload:   leaseWorkload,
		Properties: props, Check: drift, Impls: []string{"prim"},
	})
	Register(&Scenario{
		Name: "hash-lease/partition",
		Summary: "clients are cut off from the server and healed; acquisitions and renewals become uncertain and are " +
			"fenced with CLIENT KILL. Exclusion per field must hold.",
		Topo:     Topology{Kind: testbed.KindStandalone},
		Workload: leaseWorkload,
		Nemesis: func(r *rand.Rand, d time.Duration) []Event {
			return partitionClients(r, d, 1500*time.Millisecond, 500*time.Millisecond)
		},
		Properties: props, Check: drift, Impls: []string{"prim"},
	})
}
