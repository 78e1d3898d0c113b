package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// Hazard scenarios of the fenced-lock family for the failovers that discard
// acknowledged writes: a cluster replica that fell behind promoted with
// CLUSTER FAILOVER TAKEOVER or FORCE, a replica that fell behind promoted by
// hand (REPLICAOF NO ONE), and a split brain where two primaries take writes
// at once. Each proves its loss on the servers (Env.Effect) before a
// violation can count as the hazard.

// behind is how long a replica is cut from its primary before it is
// promoted: enough increments lost for a clear regression, few enough that
// the counter climbs back past its old maximum within a short run, so a token
// is reused.
const behind = 500 * time.Millisecond

// clusterForcedFailover cuts the lock slot's replica from its primary (the
// replication link and the cluster bus between them), then, behind later,
// promotes it with CLUSTER FAILOVER mode ("TAKEOVER" or "FORCE"), healing the
// cut once it has taken over (healOnceTaken).
func clusterForcedFailover(mode string) func(*rand.Rand, time.Duration, time.Duration) []Event {
	return func(_ *rand.Rand, d, _ time.Duration) []Event {
		var p, r *testbed.Node // the slot's primary and replica, chosen by the cut
		at := d / 3
		return fitting(d, []Event{
			{At: at, Name: "cut the lock slot's replica from its primary", Kind: models.NemesisFault, Do: func(ctx context.Context, e *Env) error {
				slot := prim.Slot(lockSlotKey(e))
				var err error
				if p, err = e.Topo.ClusterNodeFor(ctx, slot); err != nil {
					return err
				}
				if r, err = e.Topo.ClusterReplicaOf(ctx, slot); err != nil {
					return err
				}
				e.Note("%s↔%s, slot %d", r.Name, p.Name, slot)
				return e.Topo.Partition(r.Name, p.Name)
			}},
			{At: at + behind, Name: "CLUSTER FAILOVER " + mode + " of the lagging replica, then heal", Do: func(ctx context.Context, e *Env) error {
				if p == nil || r == nil {
					return errors.New("no replica was cut")
				}
				wctx := context.WithoutCancel(ctx)
				w := watchOffset(wctx, e, p)
				fctx, cancel := context.WithTimeout(wctx, 30*time.Second)
				defer cancel()
				// The cut lasts until the replica has taken over: only then
				// can the old primary hear that it lost its slots and the
				// nodes agree on the slot's owner again.
				if err := healOnceTaken(wctx, e, r, p, func() error { return e.Topo.ClusterFailover(fctx, r.Name, mode) }); err != nil {
					w.until(wctx, p, nil, 0)
					return err
				}
				e.Note("%s took the slot from %s", r.Name, p.Name)
				// The old primary takes writes until gossip tells it of the
				// new owner; the watch follows it until then.
				failoverLoss(wctx, e, w, p, r, 5*time.Second)
				return nil
			}},
		})
	}
}

// promoteBehind cuts replication n2↔n1, then, behind later, promotes n2 by
// hand (testbed.ForcePromote: REPLICAOF NO ONE, n1 made its replica, the
// sentinels re-pointed so the clients follow), healing the cut once n2 has
// taken over (healOnceTaken).
func promoteBehind(_ *rand.Rand, d, _ time.Duration) []Event {
	at := d / 3
	return fitting(d, []Event{
		{At: at, Name: "cut replication n2↔n1", Kind: models.NemesisFault, Do: func(_ context.Context, e *Env) error {
			return e.Topo.Partition("n2", "n1")
		}},
		{At: at + behind, Name: "promote n2 by hand (REPLICAOF NO ONE, replica behind), then heal", Do: func(ctx context.Context, e *Env) error {
			old, np := e.Topo.Node("n1"), e.Topo.Node("n2")
			wctx := context.WithoutCancel(ctx)
			w := watchOffset(wctx, e, old)
			fctx, cancel := context.WithTimeout(wctx, 30*time.Second)
			defer cancel()
			// The re-pointed sentinels wait to see n1 replicate from n2, so
			// the link is healed once n2 has taken over.
			if err := healOnceTaken(wctx, e, np, old, func() error { return e.Topo.ForcePromote(fctx, np.Name) }); err != nil {
				w.until(wctx, old, nil, 0)
				return err
			}
			failoverLoss(wctx, e, w, old, np, 0)
			return nil
		}},
	})
}

// healOnceTaken runs promote (a failover that returns once the topology
// agrees on it) while np is cut from old, and heals that cut as soon as np
// answers as a primary: the loss is certain then (old, ahead of np's
// takeover point, can only resync in full from np), and the promotion may
// wait for old to follow np, which the cut would prevent.
func healOnceTaken(ctx context.Context, e *Env, np, old *testbed.Node, promote func() error) error {
	done := make(chan error, 1)
	go func() { done <- promote() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	healed := false
	for {
		select {
		case err := <-done:
			if err == nil && !healed {
				err = e.Topo.HealPair(np.Name, old.Name)
			}
			return err
		case <-tick.C:
			if healed {
				continue
			}
			if role, _, ok := replicationOf(ctx, np); ok && role == "master" {
				if err := e.Topo.HealPair(np.Name, old.Name); err != nil {
					<-done
					return err
				}
				healed = true
			}
		}
	}
}

// splitBrain cuts n1 (the primary) and the first half of the clients off
// from the replica, the sentinels and the other clients. The sentinels
// elect n2, which the other clients follow, while n1 goes on taking the
// first half's writes: two primaries at once, for behind after the proof,
// then the split heals (and n1 goes on as a primary until the sentinels
// demote it). One event, so the heal cannot be left out of a short run
// by a slow election.
func splitBrain(_ *rand.Rand, d, _ time.Duration) []Event {
	return []Event{
		{At: d / 10, Name: "split n1 and half the clients from the rest until a replica is elected, then heal", Do: func(ctx context.Context, e *Env) error {
			old := e.Topo.Node("n1")
			side := []string{old.Name}
			for i := range len(e.Clients) / 2 {
				side = append(side, Peer(i))
			}
			wctx := context.WithoutCancel(ctx)
			w := watchOffset(wctx, e, old)
			defer func() { _ = e.Topo.HealAll() }()
			if err := e.Topo.Split(side); err != nil {
				w.until(wctx, old, nil, 0)
				return err
			}
			e.Note("%v on the old side", side)
			np, err := electedBeside(wctx, e.Topo, old, 30*time.Second)
			if err != nil {
				w.until(wctx, old, nil, 0)
				return err
			}
			e.Note("sentinels elected %s", np.Name)
			twoPrimaries(wctx, e, w, old, np, 5*time.Second)
			sleep(ctx, behind)
			return e.Topo.HealAll()
		}},
	}
}

// electedBeside waits until the sentinels name a primary other than old and
// that node says it is one.
func electedBeside(ctx context.Context, topo *testbed.Topology, old *testbed.Node, limit time.Duration) (*testbed.Node, error) {
	end := time.Now().Add(limit)
	for {
		p, err := topo.Primary(ctx)
		if err == nil && p != old {
			if role, _, ok := replicationOf(ctx, p); ok && role == "master" {
				return p, nil
			}
		}
		if time.Now().After(end) {
			return nil, fmt.Errorf("the sentinels elected no new primary within %v (last: %v, %v)", limit, p, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// twoPrimaries records the split-brain effect: np took over, and old,
// which reached more than np took over as a primary (lossProof: the fencing
// counter, or the replication offset without one), both answer as
// primaries at once: their data has diverged and what old takes will be
// discarded when it is demoted.
func twoPrimaries(ctx context.Context, e *Env, w *offsetWatch, old, np *testbed.Node, limit time.Duration) {
	proved, describe, ok := lossProof(ctx, w, np)
	if !ok {
		w.until(ctx, old, nil, 0)
		return
	}
	off, c := w.until(ctx, old, proved, limit)
	oldRole, _, ok1 := replicationOf(ctx, old)
	newRole, _, ok2 := replicationOf(ctx, np)
	if ok1 && ok2 && oldRole == "master" && newRole == "master" && proved(off, c) {
		e.EffectOngoing(old, "%s and %s both answer as primary: %s %s", old.Name, np.Name, np.Name, describe(off, c))
	}
}

func init() {
	shortStall := func(ttl time.Duration) time.Duration { return ttl / 10 }
	drift := models.Options{Drift: 20 * time.Millisecond}
	hazards := props("token-order", "exclusion", "fenced-resource")
	lost := " HAZARD expected: token regression or reuse, overlapping holders (token order, exclusion, lease protocol, " +
		"a token reused at the resource); the resource must refuse every token below its last one, and progress must hold."
	for _, mode := range []string{"TAKEOVER", "FORCE"} {
		how := map[string]string{
			"TAKEOVER": "CLUSTER FAILOVER TAKEOVER (no hand-shake with the primary, no vote of the others)",
			"FORCE":    "CLUSTER FAILOVER FORCE (no hand-shake with the primary; the other primaries vote)",
		}[mode]
		Register(&Scenario{
			Name: "fenced-lock/failover-cluster-" + map[string]string{"TAKEOVER": "takeover", "FORCE": "force"}[mode],
			Summary: "the lock slot's replica is cut from its primary for 0.5s, then promoted with " + how +
				": the acknowledged increments and leases it lacks are lost." + lost,
			Topo: clusterTopo, Workload: lockWorkload(0.1, shortStall),
			Nemesis:    clusterForcedFailover(mode),
			Properties: hazards, Check: drift, Impls: AllImpls(),
		})
	}
	Register(&Scenario{
		Name: "fenced-lock/promote-replica",
		Summary: "replication to the replica is cut for 0.5s, then an operator promotes it (REPLICAOF NO ONE, the old " +
			"primary made its replica, the sentinels re-pointed so the clients follow): the acknowledged increments and " +
			"leases it lacks are lost." + lost,
		Topo: Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3}, Workload: lockWorkload(0.1, shortStall),
		Nemesis:    promoteBehind,
		Properties: hazards, Check: drift, Impls: AllImpls(),
	})
	Register(&Scenario{
		Name: "fenced-lock/split-brain",
		Summary: "the primary and half the clients are cut off from the replica, the sentinels and the other clients; " +
			"the sentinels elect the replica, which the other clients follow, while the old primary goes on serving the " +
			"first half: two primaries hand out tokens and leases at once, then the split heals." + lost,
		// The sentinels act after 500ms without an answer (not 1s), so the
		// election comes well within a short run.
		Topo:       Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3, DownAfter: behind},
		Workload:   lockWorkload(0.1, shortStall),
		Nemesis:    splitBrain,
		Properties: hazards, Check: drift, Impls: AllImpls(),
	})
}
