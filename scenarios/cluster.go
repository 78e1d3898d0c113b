package scenarios

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// Cluster variants: each family's baseline and failover on a Redis Cluster of
// three primaries with a replica each. The clients are cluster clients; prim
// sends each script to the slot's owner and its waiters watch that node.

var clusterTopo = Topology{Kind: testbed.KindCluster, Primaries: 3, ReplicasPerPrimary: 1}

// clusterFailover hands the slot of key (with the run's prefix) to its
// primary's replica with CLUSTER FAILOVER (coordinated: the replica catches up
// first), a third of the way in.
func clusterFailover(key func(*Env) string) func(*rand.Rand, time.Duration, time.Duration) []Event {
	return func(_ *rand.Rand, d, _ time.Duration) []Event {
		return []Event{{At: d / 3, Name: "CLUSTER FAILOVER of the key's slot", Do: func(ctx context.Context, e *Env) error {
			r, err := e.Topo.ClusterReplicaOf(ctx, prim.Slot(key(e)))
			if err != nil {
				return err
			}
			e.Note("slot %d to %s", prim.Slot(key(e)), r.Name)
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			return e.Topo.ClusterFailover(fctx, r.Name, "")
		}}}
	}
}

func lockSlotKey(e *Env) string  { return "{" + e.Key(lockKey) + "}:lease" }
func leaseSlotKey(e *Env) string { return e.Key(leaseHash) }

func init() {
	drift := models.Options{Drift: 20 * time.Millisecond}
	shortStall := func(ttl time.Duration) time.Duration { return ttl / 10 }
	failoverNote := " CLUSTER FAILOVER is coordinated: the primary stops taking writes, the replica catches up, then " +
		"takes over, so no acknowledged write is lost and everything must hold."

	Register(&Scenario{
		Name:    "fenced-lock/baseline-cluster",
		Summary: "fenced-lock/baseline on a 3-primary cluster (cluster clients, MOVED-aware). Everything must hold.",
		Topo:    clusterTopo, Workload: lockWorkload(0.1, shortStall),
		Properties: props(), Check: drift, Impls: AllImpls(),
	})
	Register(&Scenario{
		Name:    "fenced-lock/failover-cluster",
		Summary: "the lock's slot fails over to its replica (CLUSTER FAILOVER) mid-run." + failoverNote,
		Topo:    clusterTopo, Workload: lockWorkload(0.1, shortStall),
		Nemesis:    clusterFailover(lockSlotKey),
		Properties: props(), Check: drift, Impls: AllImpls(),
	})

	Register(&Scenario{
		Name: "waiting-lock/handoff-cluster",
		Summary: "waiting-lock/handoff on a 3-primary cluster: each waiter's tracking connection is on the slot's " +
			"owner. Everything, liveness included, must hold.",
		Topo: clusterTopo, Workload: waitingWorkload, Properties: waitingProps, Check: waitingCheck,
		Impls: []string{"prim"}, Waits: true,
	})
	Register(&Scenario{
		Name: "waiting-lock/failover-cluster",
		Summary: "waiters sleep on invalidations from the slot's owner while the slot fails over to its replica; " +
			"they must re-subscribe on the new owner. Liveness must hold." + failoverNote,
		Topo: clusterTopo, Workload: waitingWorkload, Nemesis: clusterFailover(lockSlotKey),
		Properties: waitingProps, Check: waitingFailoverCheck,
		Impls: []string{"prim"}, Waits: true,
	})

	Register(&Scenario{
		Name:    "hash-lease/baseline-cluster",
		Summary: "hash-lease/baseline on a 3-primary cluster. Exclusion per field must hold.",
		Topo:    clusterTopo, Workload: leaseWorkload,
		Properties: []Property{{Checker: "exclusion"}, {Checker: "lease-protocol"}}, Check: drift, Impls: []string{"prim"}, Requires: []Feature{HashFieldExpiry},
	})
	Register(&Scenario{
		Name: "hash-lease/failover-cluster",
		Summary: "the hash's slot fails over to its replica (CLUSTER FAILOVER) mid-run; acquisitions must follow the slot " +
			"to its new owner (progress)." + failoverNote,
		Topo: clusterTopo, Workload: leaseWorkload, Nemesis: clusterFailover(leaseSlotKey),
		Properties: []Property{{Checker: "exclusion"}, {Checker: "lease-protocol"}}, Check: drift, Impls: []string{"prim"}, Requires: []Feature{HashFieldExpiry},
	})
}
