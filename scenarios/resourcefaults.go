package scenarios

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// Faults on the fencing side: the lock server is healthy, the resource server
// (ResourceNode) and the clients' links to it are not. Some holders stop for
// longer than their lease before writing (a GC pause), so stale writers reach
// the resource while its links are cut, slow or while it restarts: a write
// whose reply is lost is info (it may be applied when the link heals, after a
// newer holder's write), and the resource must refuse every stale one it
// decides. Everything must hold with prim; a resource that ignores tokens
// must FAIL.

// onResourceLinks applies f to the resource links of a random half of the
// clients (at least one).
func onResourceLinks(what string, f func(e *Env, peer string) error) func(context.Context, *Env, *rand.Rand) error {
	return func(_ context.Context, e *Env, r *rand.Rand) error {
		var hit []string
		first := r.IntN(len(e.Clients))
		for i := range e.Clients {
			if i != first && r.IntN(2) == 0 {
				continue
			}
			if err := f(e, Peer(i)); err != nil {
				return err
			}
			hit = append(hit, Peer(i))
		}
		e.Note("%s on %v", what, hit)
		return nil
	}
}

// restartResource kills the resource server (kill -9) and starts it again on
// its append-only file: it must come back with its last token. The event
// notes the last token before the kill and after the restart; a resource that
// came back without it would accept the stale writers it refused, which the
// fenced-resource oracle reports.
func restartResource(r *rand.Rand, d, _ time.Duration) []Event {
	before := int64(-1)
	return every(r, d, 1500*time.Millisecond, 300*time.Millisecond, "kill -9 the resource",
		func(ctx context.Context, e *Env, _ *rand.Rand) error {
			before = lastToken(ctx, e.Topo)
			return e.Topo.Kill(ResourceNode)
		},
		func(ctx context.Context, e *Env, _ *rand.Rand) error {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			if err := e.Topo.Start(sctx, ResourceNode); err != nil {
				return err
			}
			e.Note("last token %d before the kill, %d after the restart", before, lastToken(sctx, e.Topo))
			return nil
		})
}

func init() {
	// 15% of the holders stop for 1.5 leases between acquiring and writing.
	workload := lockWorkload(0.15, func(ttl time.Duration) time.Duration { return ttl + ttl/2 })
	standalone := Topology{Kind: testbed.KindStandalone}
	impls := AllImpls()
	Register(&Scenario{
		Name: "fenced-lock/resource-partition",
		Summary: "the resource links of half the clients are cut silently for 700ms and healed, while some holders " +
			"stop past their lease before writing: writes time out (info) and the cut ones reach the resource when " +
			"the link heals, possibly after a newer holder's. The resource must refuse every stale write: everything must hold.",
		Topo: standalone, Workload: workload, Needs: stallNeeds,
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return every(r, d, 1500*time.Millisecond, 700*time.Millisecond, "cut resource links",
				onResourceLinks("cut from the resource", func(e *Env, peer string) error { return e.Topo.Partition(peer, ResourceNode) }),
				healAll)
		},
		Properties: props(), Check: models.Options{Drift: 20 * time.Millisecond}, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/resource-slow",
		Summary: "every client's resource link gets 150ms ± 120ms latency each way, so a write takes from nothing to past " +
			"the 250ms client timeout and the 500ms lease: holders write late, and late writes arrive after a newer " +
			"holder's. The resource must refuse every stale write: everything must hold.",
		Topo: standalone, Workload: workload, Needs: stallNeeds,
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return every(r, d, 2*time.Second, 1200*time.Millisecond, "slow resource links",
				latencyOnEveryClientLink(ResourceNode, 150*time.Millisecond, 120*time.Millisecond), healAll)
		},
		Properties: props(), Check: models.Options{Drift: 20 * time.Millisecond}, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/resource-restart",
		Summary: "the resource server is killed -9 and restarted on its append-only file (appendfsync always), as a " +
			"fenced store must persist its last token: a resource that forgot it would accept every stale writer. " +
			"Writes during the restart are refused connections (info). Everything must hold.",
		Topo: standalone, Workload: workload, Needs: stallNeeds,
		Nemesis:    restartResource,
		Properties: props(), Check: models.Options{Drift: 20 * time.Millisecond}, Impls: impls,
	})
}
