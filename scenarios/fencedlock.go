package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// The fenced-lock family: clients contend for one lock and write to a fenced
// resource with the token they hold. Some writes come after a simulated stop of
// the client (a GC pause between the ownership check and the write), so what
// keeps the data safe is the resource refusing stale tokens, not the lock.

const lockKey = "fenced-lock"

// lockWorkload is one client: acquire, maybe stall, write with the token, release.
// A contended client tries again after 100-600µs.
func lockWorkload(stall float64, stallFor func(ttl time.Duration) time.Duration) func(ctx context.Context, env *Env, proc int) {
	return pacedLockWorkload(stall, stallFor, 100, 500)
}

// pacedLockWorkload is lockWorkload whose contended clients try again after
// minUs + [0, spreadUs) microseconds: a longer pause leaves the lock free more
// often, so an acquisition caught by a fault finds it free and takes it.
func pacedLockWorkload(stall float64, stallFor func(ttl time.Duration) time.Duration, minUs, spreadUs int) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		r := env.Rand(proc)
		c := env.Clients[proc]
		rec := env.Rec
		lease := leaseKeyOf(env.Impl, env.Key(lockKey))
		if proc == 0 {
			// The first process also runs the state sampler, a process of its own.
			done := make(chan struct{})
			go func() { defer close(done); env.sampleLease(ctx, lockKey, lease) }()
			defer func() { <-done }()
		}
		for ctx.Err() == nil {
			// Every decision of this attempt is drawn first, whatever its
			// outcome: the k-th attempt of a process is the same for a seed.
			backoff := time.Duration(minUs+r.IntN(spreadUs)) * time.Microsecond
			uncertainBackoff := time.Duration(5+r.IntN(20)) * time.Millisecond
			stalls := r.Float64() < stall
			pause := time.Duration(r.IntN(3)) * time.Millisecond
			renews := r.Float64() < 0.3
			if _, err := rec.Invoke(proc, history.Op{F: history.FAcquire, Key: lockKey, TTLMs: env.TTL.Milliseconds()}); err != nil {
				return
			}
			// Whatever the outcome, the history gets the owner the attempt sent.
			actx, att := withAttempt(ctx, lease)
			held, err := env.Impl.TryAcquire(actx, c, env.Key(lockKey), env.TTL)
			switch {
			case err == nil:
				rec.OK(proc, history.Op{Token: held.Token(), Owner: held.Owner(), TTLMs: env.TTL.Milliseconds()})
			case errors.Is(err, ErrContended):
				rec.Fail(proc, history.Op{Owner: att.Owner()})
				sleep(ctx, backoff)
				continue
			default:
				env.failedWith(proc, err, history.Op{Owner: att.Owner()})
				sleep(ctx, uncertainBackoff)
				continue
			}
			tok := held.Token()
			if tok == 0 {
				// Unfenced implementation: the harness numbers acquisitions in the
				// order they returned, so the oracle can tell which writes were
				// stale even though the resource cannot.
				tok = env.virtual.Add(1)
			}
			if stalls {
				sleep(ctx, stallFor(env.TTL)) // the process stops between check and write
			}
			env.write(proc, tok, held.Owner())
			if rn, ok := held.(Renewer); ok && renews {
				env.renewVerify(ctx, proc, rn, history.Op{Key: lockKey, Owner: held.Owner(), Token: held.Token()})
			}
			env.release(ctx, proc, history.Op{Key: lockKey, Owner: held.Owner(), Token: held.Token()}, held.Release)
			sleep(ctx, pause)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

var lockChecks = []string{"fenced-resource", "token-order", "exclusion", "lease-protocol", "no-phantom-owner"}

func props(hazards ...string) []Property {
	var out []Property
	for _, c := range lockChecks {
		p := Property{Checker: c}
		for _, h := range hazards {
			// Two owners at once is the exclusion hazard, whichever checker sees it.
			if h == c || h == "exclusion" && c == "lease-protocol" {
				p.Expect = MayHazard
			}
		}
		out = append(out, p)
	}
	return out
}

// every schedules f at random points, each followed by undo after hold.
func every(r *rand.Rand, d, gap, hold time.Duration, name string, f, undo func(context.Context, *Env, *rand.Rand) error) []Event {
	var evs []Event
	for at := gap/2 + time.Duration(r.Int64N(int64(gap/2))); at+hold < d; at += gap + time.Duration(r.Int64N(int64(gap/2))) {
		evs = append(evs,
			Event{At: at, Name: name, Kind: models.NemesisFault, Do: func(ctx context.Context, e *Env) error { return f(ctx, e, r) }},
			Event{At: at + hold, Name: "heal " + name, Kind: models.NemesisHeal, Do: func(ctx context.Context, e *Env) error { return undo(ctx, e, r) }})
	}
	return evs
}

func healAll(_ context.Context, e *Env, _ *rand.Rand) error { return e.Topo.HealAll() }

// partitionClients cuts one random client off from n1 every gap (± gap/2) for
// hold, then heals.
func partitionClients(r *rand.Rand, d, gap, hold time.Duration) []Event {
	return every(r, d, gap, hold, "partition a client",
		func(_ context.Context, e *Env, r *rand.Rand) error {
			c := Peer(r.IntN(len(e.Clients)))
			e.Note("%s cut from n1", c)
			return e.Topo.Partition(c, "n1")
		}, healAll)
}

// sentinelFailover asks the sentinels to fail over once, a third of the way in.
func sentinelFailover(_ *rand.Rand, d, _ time.Duration) []Event {
	return []Event{sentinelFailoverAt(d/3, "SENTINEL FAILOVER")}
}

// promotionAfterEnd bounds how long a failover's confirmation goes on after
// the run ended it (sentinelFailoverAt): a forced sentinel failover promotes
// within a few seconds.
const promotionAfterEnd = 15 * time.Second

// sentinelFailoverAt is a SENTINEL FAILOVER event that notes the new primary
// and records the writes the failover was seen to lose (failoverLoss), also
// when the run's end cut its confirmation short.
func sentinelFailoverAt(at time.Duration, name string) Event {
	return Event{At: at, Name: name, Do: func(ctx context.Context, e *Env) error {
		old, err := e.Topo.Primary(ctx)
		if err != nil {
			return err
		}
		wctx := context.WithoutCancel(ctx)
		w := watchOffset(wctx, e, old)
		began := time.Now()
		n, err := e.Topo.FailoverSentinel(ctx)
		var pending *testbed.PromotionPendingError
		if err != nil && ctx.Err() != nil && errors.As(err, &pending) {
			// The run ended while the failover it started was being
			// confirmed: the fault happened all the same, so the
			// confirmation goes on (bounded) and what it sees is recorded,
			// the promotion and what it lost (a fault that happened stays
			// proven when the run ends).
			ended := time.Since(began).Round(time.Millisecond)
			n, err = e.Topo.AwaitSentinelPromotion(wctx, old, promotionAfterEnd)
			if err != nil {
				w.until(wctx, old, nil, 0)
				return fmt.Errorf("the run ended %v into the wait for the sentinels to agree on a new primary, and %v more did not confirm a promotion: %w",
					ended, promotionAfterEnd, err)
			}
			e.Note("the run ended %v into its confirmation; confirmed after: new primary %s", ended, n.Name)
		} else if err != nil {
			w.until(wctx, old, nil, 0)
			return err
		} else {
			e.Note("new primary %s", n.Name)
		}
		// The sentinels demote the old primary some time after promoting the
		// new one (up to their 10s INFO period); what it takes meanwhile is
		// lost too. The proof comes with the first token the old primary
		// hands out above the new one's counter (milliseconds when clients
		// still write to it); the watch waits 3s at most for it, so that a
		// failover that lost nothing leaves the run its healthy tail.
		failoverLoss(wctx, e, w, old, n, 3*time.Second)
		return nil
	}}
}

func init() {
	noStall := func(time.Duration) time.Duration { return 0 }
	shortStall := func(ttl time.Duration) time.Duration { return ttl / 10 }
	longStall := func(ttl time.Duration) time.Duration { return ttl + ttl/2 }
	standalone := Topology{Kind: testbed.KindStandalone}
	drift := models.Options{Drift: 20 * time.Millisecond}
	impls := AllImpls()

	Register(&Scenario{
		Name:    "fenced-lock/baseline",
		Summary: "no faults; clients stall briefly before writing. Everything must hold.",
		Topo:    standalone, Workload: lockWorkload(0.1, shortStall),
		Properties: props(), Check: drift, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/pause-client",
		Summary: "clients stop for 1.5× the lease between acquiring and writing (a GC pause); the lease expires and " +
			"another owner writes. The resource must reject the stale holder: everything must hold.",
		Topo: standalone, Workload: lockWorkload(0.3, longStall), Needs: stallNeeds,
		Properties: props(), Check: drift, Impls: impls,
	})
	Register(&Scenario{
		Name:    "fenced-lock/partition-client",
		Summary: "one client at a time is cut off from the server (silently) and healed; outcomes become uncertain. Everything must hold.",
		Topo:    standalone, Workload: lockWorkload(0.1, shortStall),
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return partitionClients(r, d, 1500*time.Millisecond, 700*time.Millisecond)
		},
		Properties: props(), Check: drift, Impls: impls,
	})
	Register(&Scenario{
		Name:    "fenced-lock/latency",
		Summary: "every client link gets 20ms ± 20ms latency at times; replies come late, near lease expiry. Everything must hold.",
		Topo:    standalone, Workload: lockWorkload(0.1, shortStall),
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return every(r, d, 2*time.Second, time.Second, "latency on client links",
				latencyOnEveryClientLink("n1", 20*time.Millisecond, 20*time.Millisecond), healAll)
		},
		Properties: props(), Check: models.Options{Drift: 80 * time.Millisecond}, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/pause-primary",
		Summary: "the server is stopped (SIGSTOP) for longer than a lease (800ms, or a ttl and a tenth plus 100ms at a " +
			"long --ttl) and continued. Everything must hold.",
		Topo: standalone, Workload: lockWorkload(0.1, shortStall),
		Nemesis: pausePrimary, Needs: pauseLongerThanLeaseNeeds,
		Properties: props(), Check: drift, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/kill-restart-aof",
		Summary: "the server is killed -9 and restarted with appendfsync always: counter and leases survive. " +
			"Everything must hold.",
		Topo: Topology{Kind: testbed.KindStandalone, AOF: true}, Workload: lockWorkload(0.1, noStall),
		Nemesis:    killRestart,
		Properties: props(), Check: drift, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/kill-restart-noaof",
		Summary: "the server is killed -9 and restarted without persistence: the counter restarts from zero and live leases " +
			"vanish. HAZARD expected on token order and exclusion; the resource refuses regressed tokens below its last one, " +
			"and the oracle reports each equal token it accepted from a second owner.",
		Topo: standalone, Workload: lockWorkload(0.1, noStall),
		Nemesis:    killRestart,
		Properties: props("token-order", "exclusion", "fenced-resource"), Check: drift, Impls: impls,
	})
}

// pausePrimary stops n1 (SIGSTOP) for longer than a lease now and then
// (pauseLongerThanLease) and continues it.
func pausePrimary(r *rand.Rand, d, ttl time.Duration) []Event {
	gap, hold := pauseLongerThanLease(ttl)
	return every(r, d, gap, hold, "pause the server",
		func(_ context.Context, e *Env, _ *rand.Rand) error { return e.Topo.Pause("n1") },
		func(_ context.Context, e *Env, _ *rand.Rand) error { return e.Topo.Resume("n1") })
}

// onClientLinks applies f to a random half of the clients' links to n1.
func onClientLinks(what string, f func(*testbed.Link) error) func(context.Context, *Env, *rand.Rand) error {
	return func(_ context.Context, e *Env, r *rand.Rand) error {
		var cut []string
		for i := range e.Clients {
			if r.IntN(2) == 0 {
				continue
			}
			l, err := e.Topo.Link(Peer(i), "n1")
			if err != nil {
				return err
			}
			if err := f(l); err != nil {
				return err
			}
			cut = append(cut, Peer(i))
		}
		e.Note("%s on %v", what, cut)
		return nil
	}
}

func init() {
	shortStall := func(ttl time.Duration) time.Duration { return ttl / 10 }
	standalone := Topology{Kind: testbed.KindStandalone}
	impls := AllImpls()
	uncertain := func(name, summary string, gap, hold time.Duration, f func(*testbed.Link) error, drift time.Duration) {
		Register(&Scenario{
			Name: "fenced-lock/" + name, Summary: summary,
			Topo: standalone, Workload: lockWorkload(0.1, shortStall),
			Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
				return every(r, d, gap, hold, name+" on client links", onClientLinks(name, f), healAll)
			},
			Properties: props(), Check: models.Options{Drift: drift}, Impls: impls,
		})
	}
	Register(&Scenario{
		Name: "fenced-lock/lose-replies",
		Summary: "half the clients' links lose every reply, for 290ms twice, then for 1.5s: the server runs the command " +
			"and the client times out (250ms). After a short loss go-redis's default retries send the command again and " +
			"it runs twice (its second answer must be the first's); a long one outlasts the retries: uncertain outcomes " +
			"that really happened. Contended clients pause 5-15ms, so the lock is often free. Everything must hold.",
		// Contended clients pause 5-15ms: under the default 100-600µs
		// the lock is free at an instant about once in 20 acquisitions, and
		// an acquisition whose reply is lost has seldom taken it.
		Topo: standalone, Workload: pacedLockWorkload(0.1, shortStall, 5000, 10000),
		Nemesis:    loseReplies,
		Properties: props(), Check: models.Options{Drift: 20 * time.Millisecond}, Impls: impls,
	})
	uncertain("reset-peer", "half the clients' links are reset (TCP RST) shortly after each connection's first bytes, then healed. "+
		"Everything must hold.", 1500*time.Millisecond, 500*time.Millisecond,
		func(l *testbed.Link) error { return l.ResetPeer(5 * time.Millisecond) }, 20*time.Millisecond)
	uncertain("black-hole", "half the clients' links swallow traffic for 1.5s, closing connections after 300ms, past "+
		"the client timeout. Everything must hold.", 2*time.Second, 1500*time.Millisecond,
		func(l *testbed.Link) error { return l.BlackHole(300 * time.Millisecond) }, 20*time.Millisecond)
	uncertain("slow-replies", "half the clients' links get 100ms ± 80ms latency each way: replies arrive near and past the 250ms "+
		"client timeout and near the end of the 500ms lease. Everything must hold.", 2*time.Second, time.Second,
		func(l *testbed.Link) error { return l.Latency(100*time.Millisecond, 80*time.Millisecond) }, 80*time.Millisecond)
	// Replies slower than the lease itself: the clients keep go-redis's
	// default 3s timeout, so a grant arrives after the lease it grants has
	// ended (the holder must know it from its estimate, and the resource
	// must refuse what it writes late).
	Register(&Scenario{
		Name: "fenced-lock/slow-beyond-lease",
		Summary: "every client link gets 0.6 ± 0.2 ttls of latency each way (300ms ± 100ms at the default 500ms) for 1.5s at " +
			"a time, with go-redis's default 3s timeout: grants arrive after the lease they grant has ended. Everything " +
			"must hold. A --ttl above 1.5s (replies past the timeout) or below 10ms is UNKNOWN.",
		Topo: standalone, Workload: lockWorkload(0.1, shortStall), ClientTimeout: 3 * time.Second,
		Nemesis: func(r *rand.Rand, d, ttl time.Duration) []Event {
			lat, jit := slowBeyondLease(ttl)
			return every(r, d, 2*time.Second, 1500*time.Millisecond, fmt.Sprintf("%v ± %v latency on every client link", lat, jit),
				latencyOnEveryClientLink("n1", lat, jit), healAll)
		},
		Needs:      slowBeyondLeaseNeeds,
		Properties: props(), Check: models.Options{Drift: 80 * time.Millisecond}, Impls: impls,
	})
}

// latencyOnEveryClientLink gives every client's link to node latency ±
// jitter, each way.
func latencyOnEveryClientLink(node string, latency, jitter time.Duration) func(context.Context, *Env, *rand.Rand) error {
	return func(_ context.Context, e *Env, _ *rand.Rand) error {
		for i := range e.Clients {
			l, err := e.Topo.Link(Peer(i), node)
			if err != nil {
				return err
			}
			if err := l.Latency(latency, jitter); err != nil {
				return err
			}
		}
		return nil
	}
}

// loseReplies loses the replies on a random half of the client links, in
// short and long windows (two short ones, then a long one):
//
//   - short (290ms): the command sent first in it runs and its reply is held
//     back past the client's 250ms timeout (a window shorter than the timeout
//     only delays replies); go-redis (MaxRetries 3) sends the command again
//     on a new connection, which gets through once the window ends, so the
//     command runs a second time within the lease its first run may have
//     taken, and the second answer arrives. A script that is not idempotent
//     for its own caller answers differently the second time: an acquisition
//     that finds its own lease says "not acquired" (a phantom owner). A
//     longer window makes the resend come after that lease expired;
//   - long (1.5s, longer than go-redis's retries: 4 attempts of 250ms plus
//     back-off, the resends on new connections whose handshake replies are
//     lost too): the outcome stays unknown, with the command run once.
func loseReplies(r *rand.Rand, d, _ time.Duration) []Event {
	const name = "lose-replies on client links"
	short, long := 290*time.Millisecond, 1500*time.Millisecond
	var evs []Event
	at := 200*time.Millisecond + time.Duration(r.Int64N(int64(300*time.Millisecond)))
	for k := 0; ; k++ {
		hold, rest := short, 150*time.Millisecond
		if k%3 == 2 {
			hold, rest = long, 500*time.Millisecond
		}
		if at+hold >= d {
			return evs
		}
		what := fmt.Sprintf("%s for %v", name, hold)
		evs = append(evs,
			Event{At: at, Name: what, Kind: models.NemesisFault, Do: func(ctx context.Context, e *Env) error {
				return onClientLinks("lose-replies", func(l *testbed.Link) error { return l.LoseReplies() })(ctx, e, r)
			}},
			Event{At: at + hold, Name: "heal " + what, Kind: models.NemesisHeal, Do: func(ctx context.Context, e *Env) error { return healAll(ctx, e, r) }})
		at += hold + rest + time.Duration(r.Int64N(int64(rest)))
	}
}

// killRestart kills the server and starts it again on the same data
// directory; each restart that comes back without the data is the effect
// (a canary key written just before the kill is gone).
func killRestart(r *rand.Rand, d, _ time.Duration) []Event {
	before := int64(-1)
	return every(r, d, 3*time.Second, 300*time.Millisecond, "kill -9 the server",
		func(ctx context.Context, e *Env, _ *rand.Rand) error {
			before = plantCanary(ctx, e.Topo.Node("n1"))
			return e.Topo.Kill("n1")
		},
		func(ctx context.Context, e *Env, _ *rand.Rand) error {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			if err := e.Topo.Start(sctx, "n1"); err != nil {
				return err
			}
			return checkCanary(sctx, e, e.Topo.Node("n1"), before, "the restart")
		})
}

func init() {
	Register(&Scenario{
		Name: "fenced-lock/failover-forced",
		Summary: "replication to the replica is cut, then the sentinels are told to fail over at once: the new primary " +
			"lacks the last counter increments and leases. HAZARD expected (token regression, overlapping holders); " +
			"the resource refuses tokens below its last one, and the oracle reports each stale write it accepted " +
			"because a regressed counter handed a second owner a token already used.",
		Topo:     Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3},
		Workload: lockWorkload(0.1, func(ttl time.Duration) time.Duration { return ttl / 10 }),
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			at := d / 3
			return fitting(d, []Event{
				{At: at, Name: "cut replication n2↔n1", Kind: models.NemesisFault, Do: func(_ context.Context, e *Env) error { return e.Topo.Partition("n2", "n1") }},
				// Half a second of increments the replica lacks: enough for a clear
				// regression, little enough that the counter climbs back past its
				// old maximum within a short run, so a token is reused.
				sentinelFailoverAt(at+500*time.Millisecond, "SENTINEL FAILOVER (forced, replica behind)"),
				{At: at + time.Second, Name: "heal", Kind: models.NemesisHeal, Do: func(_ context.Context, e *Env) error { return e.Topo.HealAll() }},
			})
		},
		Properties: props("token-order", "exclusion", "fenced-resource"),
		Check:      models.Options{Drift: 20 * time.Millisecond},
		Impls:      AllImpls(),
	})
}

func init() {
	shortStall := func(ttl time.Duration) time.Duration { return ttl / 10 }
	drift := models.Options{Drift: 20 * time.Millisecond}
	impls := AllImpls()
	Register(&Scenario{
		Name:    "fenced-lock/partition-primary",
		Summary: "the server is cut off from every client (silently) and healed; outcomes become uncertain. Everything must hold.",
		Topo:    Topology{Kind: testbed.KindStandalone}, Workload: lockWorkload(0.1, shortStall),
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return every(r, d, 2*time.Second, 700*time.Millisecond, "isolate the server",
				func(_ context.Context, e *Env, _ *rand.Rand) error { return e.Topo.Isolate("n1") }, healAll)
		},
		Properties: props(), Check: drift, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/failover-sentinel",
		Summary: "the sentinels fail over while replication is healthy; the last increments may or may not have " +
			"replicated. May show hazard on token order, exclusion and (a token reused by a second owner) the resource.",
		Topo: Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3}, Workload: lockWorkload(0.1, shortStall),
		Nemesis:    sentinelFailover,
		Properties: props("token-order", "exclusion", "fenced-resource"), Check: drift, Impls: impls,
	})
	Register(&Scenario{
		Name: "fenced-lock/clock-skew",
		Summary: "the server restarts (with AOF) with its wall clock 4 leases ahead: every live lease expires at " +
			"once while its holder still counts on it, and back on true time later. HAZARD expected on exclusion; tokens " +
			"and the resource must hold. Each restart is seen to set the clock (TIME read back), else UNKNOWN.",
		// Holders keep the lock for half a lease, so one is mid-lease when the clock jumps.
		Topo: Topology{Kind: testbed.KindStandalone, AOF: true}, Workload: lockWorkload(0.9, func(ttl time.Duration) time.Duration { return ttl / 2 }),
		// Each restart must be seen to set the clock (else the run is
		// UNKNOWN): leaseClockJumps, as the semaphore and rwlock families.
		Nemesis:    leaseClockJumps,
		Properties: props("exclusion"), Check: drift, Impls: impls,
		NoLeakScan: "the server's clock was moved: a lease set while it ran ahead outlives its TTL in real time",
	})
	Register(&Scenario{
		Name: "fenced-lock/eviction",
		Summary: "the server runs allkeys-lru with little memory and filler data arrives (then the limit is lifted): the " +
			"lease and the counter itself can be evicted, the counter restarting from zero. May show hazard on token order, exclusion and (a token reused by a second owner) the resource.",
		Topo: Topology{Kind: testbed.KindStandalone}, Workload: lockWorkload(0.1, shortStall),
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			return []Event{
				{At: d / 4, Name: "maxmemory 4mb, allkeys-lru", Kind: models.NemesisFault, Do: func(ctx context.Context, e *Env) error {
					return e.Topo.EvictionPressure(ctx, "n1", "4mb", "allkeys-lru")
				}},
				{At: d / 3, Name: "fill memory", Do: func(ctx context.Context, e *Env) error {
					a := e.Topo.Node("n1").Admin()
					counter := e.counterKey()
					before := int64(-1)
					if counter != "" {
						before, _ = a.Get(ctx, counter).Int64()
					}
					// The server names each key it evicts (keyspace events):
					// the lock's lease or counter among them is the proof.
					lease := leaseKeyOf(e.Impl, e.Key(lockKey))
					var evictedLease, evictedCounter atomic.Bool // the lock's keys seen evicted
					if err := a.ConfigSet(ctx, "notify-keyspace-events", "Ee").Err(); err != nil {
						return err
					}
					sub := a.Subscribe(ctx, "__keyevent@0__:evicted")
					defer sub.Close()
					if _, err := sub.Receive(ctx); err != nil {
						return err
					}
					drained := make(chan struct{})
					go func() {
						defer close(drained)
						for m := range sub.Channel() {
							switch {
							case m.Payload == lease:
								evictedLease.Store(true)
							case counter != "" && m.Payload == counter:
								evictedCounter.Store(true)
							}
						}
					}()
					val := make([]byte, 4096)
					for round := 0; round < 4; round++ {
						p := a.Pipeline()
						for i := 0; i < 1000; i++ {
							p.Set(ctx, fmt.Sprintf("filler:%d:%d", round, i), val, 0)
						}
						if _, err := p.Exec(ctx); err != nil {
							return err
						}
					}
					n, ok := infoInt(ctx, e.Topo.Node("n1"), "stats", "evicted_keys")
					// The last events arrive after the filler's replies;
					// then the limit is lifted, so that every eviction (the
					// loss) falls within the proof's watch.
					sleep(ctx, 200*time.Millisecond)
					if err := a.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
						return err
					}
					sleep(ctx, 50*time.Millisecond)
					_ = sub.Close()
					<-drained
					// An evicted lease explains two holders (and the
					// answers that follow), not the tokens; an evicted
					// counter the tokens, not two holders.
					var kinds, which []string
					if evictedLease.Load() {
						kinds, which = append(kinds, models.LeaseLossKinds...), append(which, lease)
					}
					if evictedCounter.Load() {
						kinds, which = append(kinds, models.TokenLossKinds...), append(which, counter)
					}
					if len(kinds) > 0 {
						e.EffectExplaining(kinds, "n1 evicted %d keys (allkeys-lru, maxmemory 4mb), the lock's %s among them", n, strings.Join(which, " and "))
						return nil
					}
					switch {
					case !ok || n == 0:
					case counter == "":
						// No counter to watch: the evictions are the proof
						// (weaker: they may all have been filler).
						e.EffectExplaining(models.LeaseLossKinds, "n1 evicted %d keys (allkeys-lru, maxmemory 4mb); the implementation has no fencing counter to watch", n)
					case before > 0:
						// The counter only grows unless it is evicted (and
						// restarted from zero by the next grant).
						after, err := a.Get(ctx, counter).Int64()
						if errors.Is(err, redis.Nil) {
							after, err = 0, nil
						}
						if err == nil && after < before {
							e.EffectExplaining(models.TokenLossKinds, "n1 evicted %d keys (allkeys-lru, maxmemory 4mb), the fencing counter among them: %d before the filler, %d after", n, before, after)
						}
					}
					return nil
				}},
			}
		},
		Properties: props("token-order", "exclusion", "fenced-resource"), Check: drift, Impls: impls,
	})
}
