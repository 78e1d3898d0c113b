package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// The redlock family: redlock/<fault>. Every client process contends for one
// Redlock lease across an independent set of servers (three here, each
// behind its own links), as a service using a Redlock group does: it
// acquires once, keeps the lease a while, checks that its validity has not
// run out, writes to the protected resource, sometimes renews, and releases.
// Redlock hands out no fencing token, so the resource cannot refuse a stale
// writer: the harness numbers the acquisitions in the order they returned
// (as for the unfenced locks of fenced-lock/*), and the fenced-resource
// oracle lists the writes the resource accepted out of that order. The
// exclusion checker holds the holders' validity windows (invocation + ttl);
// redlock-validity holds each acquisition's claimed validity to the ttl less
// the drift allowance its implementation declares and less the time the
// acquisition took (models.CheckRedlockValidity, from the history alone: the
// acquisition's ok records both the claim and the declared allowance).

// redlockKey is the lock's key on every node.
const redlockKey = "redlock"

// redlockNodes is the size of the family's independent set.
const redlockNodes = 3

// redlockLatency is redlock/latency's added delay, each way: a round trip of
// twice it stays under prim's 100ms node timeout, so acquisitions succeed,
// and takes long enough for the elapsed time to matter to the validity.
const redlockLatency = 40 * time.Millisecond

// redlockWorkload is one client of the redlock family. stall is the share of
// holders that stop (a GC pause) for stallFor(ttl) after checking that the
// lease is still valid and before writing to the resource: the write then
// reaches the resource after the lease ended. long makes holders keep the
// lease for a quarter to three quarters of the ttl (else a twentieth to a
// quarter), so that a holder is still counting on it when nodes restarted
// or moved their clocks come back.
func redlockWorkload(stall float64, stallFor func(ttl time.Duration) time.Duration, long bool) func(ctx context.Context, env *Env, proc int) {
	return redlockWorkloadRenewing(stall, stallFor, long, 0.3, 1)
}

// redlockWorkloadRenewing is redlockWorkload whose holders renew with
// probability renew, up to renewals times in a row.
func redlockWorkloadRenewing(stall float64, stallFor func(ttl time.Duration) time.Duration, long bool, renew float64, renewals int) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		r := env.Rand(proc)
		rec := env.Rec
		key := env.Key(redlockKey)
		nodes := env.NodeClients[proc]
		ttlMs := env.TTL.Milliseconds()
		for ctx.Err() == nil {
			// Every decision of this attempt is drawn first, whatever its
			// outcome: the k-th attempt of a process is the same for a seed.
			backoff := time.Duration(500+r.IntN(2000)) * time.Microsecond
			uncertainBackoff := time.Duration(5+r.IntN(20)) * time.Millisecond
			hold := env.TTL/20 + time.Duration(r.Int64N(int64(env.TTL/5)))
			if long {
				hold = env.TTL/4 + time.Duration(r.Int64N(int64(env.TTL/2)))
			}
			stalls := r.Float64() < stall
			renews := r.Float64() < renew
			// After a renewal, the holder keeps the lease most of a ttl
			// more (past its first expiry) and writes again.
			holdMore := env.TTL/2 + time.Duration(r.Int64N(int64(env.TTL/3)))
			pause := time.Duration(r.IntN(3)) * time.Millisecond
			if _, err := rec.Invoke(proc, history.Op{F: history.FAcquire, Key: redlockKey, TTLMs: ttlMs}); err != nil {
				return
			}
			actx, att := withAttempt(ctx, key)
			held, err := env.Redlock.TryAcquire(actx, nodes, key, env.TTL)
			switch {
			case err == nil:
				// Count: the validity the implementation claims at its
				// return, in µs; DriftUs: the drift allowance it declares
				// for the ttl (redlock-validity judges the one by the other).
				rec.OK(proc, history.Op{Owner: held.Owner(), TTLMs: ttlMs, Count: held.Validity().Microseconds(),
					DriftUs: env.Redlock.DriftAllowance(env.TTL).Microseconds()})
			case errors.Is(err, ErrContended):
				rec.Fail(proc, history.Op{Owner: att.Owner()})
				sleep(ctx, backoff)
				continue
			case errors.Is(err, errNotGranted):
				// Definitely not held, but unanswered (progress counts it).
				rec.Fail(proc, history.Op{Owner: att.Owner(), Err: firstLine(err.Error())})
				sleep(ctx, uncertainBackoff)
				continue
			default:
				env.failedWith(proc, err, history.Op{Owner: att.Owner()})
				sleep(ctx, uncertainBackoff)
				continue
			}
			tok := env.virtual.Add(1) // no fencing token: the harness numbers the acquisitions
			env.holding.set(proc, true)
			sleep(ctx, hold)
			// The protected work: only while the lease has time left for
			// it (a tenth of the ttl), as the Redlock description says. A
			// stall between the check and the write is what no lease can
			// guard against.
			if held.Validity() > env.TTL/10 {
				if stalls {
					sleep(ctx, stallFor(env.TTL))
				}
				env.write(proc, tok, held.Owner())
			}
			// A renewing holder keeps the lease through up to renewals
			// renewals, each followed by most of a ttl more (past the
			// previous expiry) and another write.
			for k := 0; renews && !stalls && k < renewals && ctx.Err() == nil; k++ {
				op := history.Op{F: history.FRenew, Key: redlockKey, Owner: held.Owner(), TTLMs: ttlMs}
				if _, err := rec.Invoke(proc, op); err != nil {
					break
				}
				ok, err := held.Renew(ctx, env.TTL)
				switch {
				case err != nil:
					env.failed(proc, err)
				case ok:
					rec.OK(proc, history.Op{})
				default:
					rec.Fail(proc, history.Op{})
				}
				if err != nil || !ok {
					break
				}
				sleep(ctx, holdMore)
				if held.Validity() > env.TTL/10 {
					env.write(proc, tok, held.Owner())
				}
			}
			env.release(ctx, proc, history.Op{Key: redlockKey, Owner: held.Owner()}, held.Release)
			env.holding.set(proc, false)
			sleep(ctx, pause)
		}
	}
}

// redlockProps is the family's properties: exclusion and the lease
// protocol (may show hazard where the scenario's fault breaks the
// algorithm's assumptions), the claimed validity, progress and leaks, and,
// where no hazard is expected, the resource: a stale write the unfenced
// resource accepts is never a hazard (DESIGN), so a scenario whose fault
// may give two holders the lock does not hold the resource to it (the
// exclusion checker shows the two holders).
func redlockProps(hazard bool) []Property {
	if hazard {
		return []Property{{Checker: "exclusion", Expect: MayHazard, Hazards: []string{models.KindOverlap}},
			{Checker: "lease-protocol", Expect: MayHazard}, {Checker: "redlock-validity"}}
	}
	return []Property{{Checker: "exclusion"}, {Checker: "fenced-resource"}, {Checker: "lease-protocol"}, {Checker: "redlock-validity"}}
}

// redlockScenario registers redlock/<fault>.
func redlockScenario(s *Scenario) {
	s.Name = "redlock/" + s.Name
	s.Redlock, s.Impls = true, []string{"prim", "redsync"}
	if s.Topo.Kind == "" {
		s.Topo = Topology{Kind: testbed.KindIndependent, Nodes: redlockNodes}
	}
	if s.Workload == nil {
		s.Workload = redlockWorkload(0, nil, false)
	}
	if s.Check == (models.Options{}) {
		s.Check = models.Options{Drift: 20 * time.Millisecond}
	}
	s.Needs = allNeeds(s.Needs, redlockTTLNeeds) // its own first: redlock/latency's floor is the higher
	Register(s)
}

// nodeName is the i-th node of the independent set (r1…).
func nodeName(i int) string { return fmt.Sprintf("r%d", i+1) }

// cutClientFromMajority cuts one client (a holder of the lock when there is
// one, else a random one), silently, from a majority of the nodes (a random
// one left reachable) for hold, every gap: its commands there time out. A correct Redlock cannot reach a quorum from it;
// one that counts a timed-out node as a success, or renews on a minority,
// takes or keeps a lock the others take too.
func cutClientFromMajority(gap, hold time.Duration) func(*rand.Rand, time.Duration, time.Duration) []Event {
	return func(r *rand.Rand, d, _ time.Duration) []Event {
		return every(r, d, gap, hold, "cut a client from a majority of the nodes",
			func(_ context.Context, e *Env, r *rand.Rand) error {
				// The holder, when there is one: its renewals then meet
				// the cut.
				c := Peer(e.holding.pick(r, len(e.Clients)))
				keep := r.IntN(redlockNodes)
				var cut []string
				for i := range redlockNodes {
					if i == keep {
						continue
					}
					if err := e.Topo.Partition(c, nodeName(i)); err != nil {
						return err
					}
					cut = append(cut, nodeName(i))
				}
				e.Note("%s cut from %v", c, cut)
				return nil
			}, healAll)
	}
}

// restartNodes kills the given nodes and starts them again at once, without
// persistence (the topology has no AOF): each forgets every lock it held.
// The canary planted before each kill proves the loss.
func restartNodes(at time.Duration, names ...string) Event {
	return Event{At: at, Name: fmt.Sprintf("kill -9 %v and restart them without persistence", names), Do: func(ctx context.Context, e *Env) error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		before := map[string]int64{}
		for _, n := range names {
			before[n] = plantCanary(sctx, e.Topo.Node(n))
			if err := e.Topo.Kill(n); err != nil {
				return err
			}
		}
		for _, n := range names {
			if err := e.Topo.Start(sctx, n); err != nil {
				return err
			}
		}
		for _, n := range names {
			if err := checkCanary(sctx, e, e.Topo.Node(n), before[n], "the restart of "+n); err != nil {
				return err
			}
		}
		return nil
	}}
}

func init() {
	redlockScenario(&Scenario{Name: "baseline",
		Summary: "no faults; 8 processes contend for one Redlock lease on 3 independent servers, check its validity, " +
			"write to the resource, renew some and release. Everything must hold.",
		Properties: redlockProps(false)})
	redlockScenario(&Scenario{Name: "baseline-five",
		Summary: "redlock/baseline on 5 independent servers (a quorum of 3). Everything must hold.",
		Topo:    Topology{Kind: testbed.KindIndependent, Nodes: 5}, Properties: redlockProps(false)})
	redlockScenario(&Scenario{Name: "node-loss",
		Summary: "one node is killed a third of the way in and started again, empty, only after more than a ttl (the " +
			"Redlock rule for restarts without persistence; plus a margin for the drift allowance): two thirds of the " +
			"way in, or later at a long --ttl (a run too short for it is UNKNOWN). A majority stays, so everything must hold.",
		Properties: redlockProps(false),
		Nemesis:    nodeLoss,
		Needs:      nodeLossNeeds})
	redlockScenario(&Scenario{Name: "partition-minority",
		Summary: "one node at a time (a minority) is cut off silently from every client and healed: its commands time " +
			"out and count as failed; a majority stays. Everything must hold.",
		Properties: redlockProps(false),
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return every(r, d, 1500*time.Millisecond, 700*time.Millisecond, "isolate a node",
				func(_ context.Context, e *Env, r *rand.Rand) error {
					n := nodeName(r.IntN(redlockNodes))
					e.Note("%s cut from every client", n)
					return e.Topo.Isolate(n)
				}, healAll)
		}})
	redlockScenario(&Scenario{Name: "partition-client",
		Summary: "one client at a time is cut off silently from two of the three nodes (a majority) and healed: it " +
			"cannot reach a quorum, so it cannot take the lock, and its renewals fail and end its lease. Everything " +
			"must hold; a Redlock that counts a timed-out node as a success, or renews on a minority, takes or keeps " +
			"the lock beside another holder.",
		Properties: redlockProps(false),
		Workload:   redlockWorkloadRenewing(0, nil, false, 1, 6),
		Nemesis:    cutClientFromMajority(time.Second, 800*time.Millisecond)})
	redlockScenario(&Scenario{Name: "slow-node",
		Summary: "one node answers every client 150ms late (more than the 100ms node timeout) for a while: it counts " +
			"as failed, and its commands land after the attempt gave up (the implementation releases them). " +
			"Everything must hold.",
		Properties: redlockProps(false),
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return every(r, d, 2*time.Second, time.Second, "slow a node down",
				func(_ context.Context, e *Env, r *rand.Rand) error {
					n := nodeName(r.IntN(redlockNodes))
					for p := range e.Clients {
						l, err := e.Topo.Link(Peer(p), n)
						if err != nil {
							return err
						}
						if err := l.Latency(150*time.Millisecond, 0); err != nil {
							return err
						}
					}
					e.Note("%s 150ms late to every client", n)
					return nil
				}, healAll)
		}})
	redlockScenario(&Scenario{Name: "latency",
		Summary: "every node answers every client 40ms late each way (a round trip of 80ms, under the 100ms node " +
			"timeout) for most of the run: acquisitions still reach a quorum, and the time they take (a sixth of " +
			"the 500ms ttl) must come off the validity they claim (redlock-validity). Everything must hold. A --ttl " +
			"below 240ms, which keeps little validity after the round trip, is UNKNOWN.",
		Properties: redlockProps(false),
		Needs:      redlockLatencyNeeds,
		Nemesis: func(_ *rand.Rand, d, _ time.Duration) []Event {
			return []Event{
				{At: d / 6, Name: "40ms latency each way on every client link to every node", Kind: models.NemesisFault,
					Do: func(ctx context.Context, e *Env) error {
						for i := range redlockNodes {
							if err := latencyOnEveryClientLink(nodeName(i), redlockLatency, 0)(ctx, e, nil); err != nil {
								return err
							}
						}
						e.Note("every node %v late each way to every client", redlockLatency)
						return nil
					}},
				{At: 5 * d / 6, Name: "heal the latency", Kind: models.NemesisHeal,
					Do: func(ctx context.Context, e *Env) error { return healAll(ctx, e, nil) }},
			}
		}})
	redlockScenario(&Scenario{Name: "clock-skew",
		Summary: "two of the three nodes (a majority) restart with their wall clocks 4 leases ahead (with AOF: the " +
			"keys survive, their expiry does not): every lease they hold expires at once, and another client takes " +
			"the lock while its holder still counts on it. HAZARD expected (exclusion: two holders), with the clocks " +
			"read back from TIME as the proof; UNKNOWN if they did not move.",
		Topo:       Topology{Kind: testbed.KindIndependent, Nodes: redlockNodes, AOF: true},
		Properties: redlockProps(true),
		Nemesis:    redlockClockJump,
		Workload:   redlockWorkload(0, nil, true),
		NoLeakScan: "the servers' clocks were moved: a lease set while they ran ahead outlives its TTL in real time"})
	redlockScenario(&Scenario{Name: "restart-without-persistence",
		Summary: "three times, two of the three nodes (a majority) are killed and restarted at once without persistence: they " +
			"forget the lease, and another client takes it on them while its holder still counts on it. HAZARD " +
			"expected (exclusion: two holders; the Redlock description's own counter-example, whose fix is the " +
			"delayed restart of redlock/node-loss), with the lost dataset proven.",
		Properties: redlockProps(true),
		Workload:   redlockWorkload(0, nil, true),
		Nemesis: func(_ *rand.Rand, d, _ time.Duration) []Event {
			return []Event{restartNodes(d/4, "r1", "r2"), restartNodes(d/2, "r2", "r3"), restartNodes(3*d/4, "r1", "r3")}
		}})
	redlockScenario(&Scenario{Name: "pause-client",
		Summary: "a third of the holders stop for 1.5× the ttl between checking the lease's validity and writing " +
			"(a GC pause): the lease expires, another client takes it and writes, and the paused write arrives " +
			"after. Redlock gives no fencing token, so the unfenced resource accepts it: stale-write-shown PASSes " +
			"when it lists those stale writes (the reason to fence, shown — not a bug in the algorithm), is UNKNOWN " +
			"when no pause caught a write, and FAILs on any other violation; exclusion must hold.",
		Properties: []Property{{Checker: "exclusion"}, {Checker: "stale-write-shown"}, {Checker: "lease-protocol"}, {Checker: "redlock-validity"}},
		Workload:   redlockWorkload(0.3, func(ttl time.Duration) time.Duration { return ttl + ttl/2 }, false),
		Needs:      stallNeeds})
}

// nodeLoss kills r1 and starts it again, empty, more than a ttl plus the
// drift margin later (nodeLossSchedule). The restart also waits, if it must,
// until that long after the kill really happened: a kill run late (a
// loaded machine) must not bring the node back inside a lease it held.
func nodeLoss(_ *rand.Rand, d, ttl time.Duration) []Event {
	kill, restart := nodeLossSchedule(d, ttl)
	var killed time.Time
	return []Event{
		{At: kill, Name: "kill -9 r1", Kind: models.NemesisFault, Do: func(_ context.Context, e *Env) error {
			err := e.Topo.Kill("r1")
			killed = time.Now()
			return err
		}},
		{At: restart, Name: fmt.Sprintf("start r1 again, empty, more than a ttl later (%v after the kill)", (restart - kill).Round(time.Millisecond)),
			Kind: models.NemesisHeal, Do: func(ctx context.Context, e *Env) error {
				sleep(ctx, time.Until(killed.Add(redlockRestartAfter(e.TTL))))
				if ctx.Err() != nil {
					return ctx.Err()
				}
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
				defer cancel()
				return e.Topo.Start(sctx, "r1")
			}},
	}
}

// redlockClockJump restarts r1 and r2 with their clocks 4 ttls ahead at d/5
// and 3d/5 (AOF keeps the keys), and on true time at 2d/5 and 4d/5: two
// chances for the jump to catch a holder. A jump ahead waits (up to two ttls,
// at most a tenth of the run) for a lease taken a moment before, then takes both nodes down together and
// brings them back together: the lease's holder counts on it for a quarter of
// a ttl or more, while on the restarted majority it has already expired, so
// another client takes it inside the holder's window unless the restart itself
// outlasts the hold (a CI run's seeds missed the overlap when the two nodes
// restarted one after the other, at no particular moment). Each restart is
// read back (TIME), and a restart that did not set the clock fails the event.
func redlockClockJump(_ *rand.Rand, d, _ time.Duration) []Event {
	restart := func(ahead bool) func(context.Context, *Env) error {
		return func(ctx context.Context, e *Env) error {
			if ahead {
				// At most a tenth of the run, so a long --ttl cannot push
				// the later restarts past its end.
				if p, ok := e.holding.waitFresh(ctx, e.TTL/20, min(2*e.TTL, d/10)); ok {
					e.Note("p%d took the lease just before", p)
				}
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			names := []string{"r1", "r2"}
			skews, err := restartClocks(sctx, e, names, ahead)
			if err != nil {
				return err
			}
			if ahead {
				read := make([]string, len(names))
				for i, n := range names {
					read[i] = fmt.Sprintf("%s's %v", n, skews[i].Round(time.Millisecond))
				}
				e.EffectExplaining(models.LeaseLossKinds, "a majority's clocks read ahead of real time by more than a ttl: %v", read)
			}
			return nil
		}
	}
	return []Event{
		{At: d / 5, Name: "restart r1 and r2 4 leases ahead", Do: restart(true)},
		{At: 2 * d / 5, Name: "restart r1 and r2 on true time", Do: restart(false)},
		{At: 3 * d / 5, Name: "restart r1 and r2 4 leases ahead", Do: restart(true)},
		{At: 4 * d / 5, Name: "restart r1 and r2 on true time", Do: restart(false)},
	}
}

// holderSet is which processes hold the lock now (the redlock workload keeps
// it; a nemesis picks its target in it).
type holderSet struct {
	mu sync.Mutex
	on map[int]time.Time // since when
}

func (h *holderSet) set(proc int, holding bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.on == nil {
		h.on = map[int]time.Time{}
	}
	if holding {
		h.on[proc] = time.Now()
	} else {
		delete(h.on, proc)
	}
}

// waitFresh waits up to max for a process that took the lock within the
// last within, and returns it; false when none did in time (the caller goes
// on: the fault still happens, it may just catch no holder).
func (h *holderSet) waitFresh(ctx context.Context, within, max time.Duration) (int, bool) {
	deadline := time.Now().Add(max)
	for {
		h.mu.Lock()
		for p, since := range h.on {
			if time.Since(since) <= within {
				h.mu.Unlock()
				return p, true
			}
		}
		h.mu.Unlock()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, false
		}
		time.Sleep(time.Millisecond)
	}
}

// pick returns one of the processes that hold the lock (or a permit), or a
// random one of n when none does; r is drawn once either way, so the draws
// stay the seed's.
func (h *holderSet) pick(r *rand.Rand, n int) int {
	x := r.IntN(n)
	h.mu.Lock()
	defer h.mu.Unlock()
	holders := make([]int, 0, len(h.on))
	for p := range h.on {
		holders = append(holders, p)
	}
	if len(holders) == 0 {
		return x
	}
	slices.Sort(holders)
	return holders[x%len(holders)]
}
