package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// The ratelimit family: ratelimit/<algo>/<fault>. Every client process
// hammers a few shared limiter keys with requests for 1-3 permits (Allow,
// and Wait where the implementation can), each recorded with its limiter's
// configuration; the rate-limit checker holds the grants to the algorithm's
// bound (models.CheckRateLimit). The keys change every three windows (a new
// epoch), so each run sees fresh limiters too: a limiter's first window,
// where a sliding window that rounds timestamps backward shows, comes again.
//
// Each process has its own clock, skewed by up to three quarters of a
// window from the others (clockOf): an implementation that decides on the
// server's TIME ignores it, one that trusts the client's clock breaks its
// bound. The clients keep every go-redis default, their 3s timeouts
// included (ClientTimeout): a rate limiter's users have those.

// rateKeys is how many limiter keys the processes share at once.
const rateKeys = 2

// clockOf is a process's clock: real time shifted by (proc mod 4 − 1)
// quarters of the limiter's window or period.
func clockOf(proc int, cfg LimitConfig) func() time.Time {
	off := time.Duration(proc%4-1) * cfg.span() / 4
	return func() time.Time { return time.Now().Add(off) }
}

// rateWorkload is one client process of the ratelimit family.
func rateWorkload(cfg LimitConfig, waitShare float64) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		r := env.Rand(proc)
		c := env.Clients[proc]
		clock := clockOf(proc, cfg)
		limiters := map[string]Limiter{}
		epoch := 3 * cfg.span()
		for ctx.Err() == nil {
			// Every decision of this request is drawn first, whatever its
			// outcome: the k-th request of a process is the same for a seed.
			k := r.IntN(rateKeys)
			n := int64(1)
			if x := r.IntN(10); x >= 9 {
				n = 3
			} else if x >= 7 {
				n = 2
			}
			n = min(n, cfg.most())
			wait := r.Float64() < waitShare
			pause := time.Duration(r.IntN(2000)) * time.Microsecond
			key := fmt.Sprintf("ratelimit:%s:%d:e%d", cfg.Algo, k, env.Rec.Now()/int64(epoch))
			l := limiters[key]
			if l == nil {
				var err error
				if l, err = env.Limiter.New(c, env.Key(key), cfg, clock); err != nil {
					env.Log.Warn("coordtorture: no limiter", "key", key, "err", err)
					sleep(ctx, 20*time.Millisecond)
					continue
				}
				limiters[key] = l
			}
			w, canWait := l.(LimiterWaiter)
			op := cfg.op()
			op.F, op.Key, op.N = history.FAllow, key, n
			if wait && canWait {
				op.F = history.FAllowWait
			}
			if _, err := env.Rec.Invoke(proc, op); err != nil {
				return
			}
			var ok bool
			var err error
			if op.F == history.FAllowWait {
				// A wait is bounded by half a window (or period): permits
				// come back within it, and a process does not spend the run
				// waiting while the others hammer the key.
				wctx, cancel := context.WithTimeout(ctx, cfg.span()/2)
				ok, err = w.Wait(wctx, n)
				cancel()
			} else {
				ok, err = l.Allow(ctx, n)
			}
			switch {
			case err != nil:
				env.failed(proc, err)
				sleep(ctx, 5*time.Millisecond)
			case ok:
				env.Rec.OK(proc, history.Op{})
			default:
				env.Rec.Fail(proc, history.Op{})
			}
			sleep(ctx, pause)
		}
	}
}

// The algorithms' configurations. window (fixed, sliding) or period
// (bucket) is scaled by the scenario.
func fixedCfg(limit int64, window time.Duration) LimitConfig {
	return LimitConfig{Algo: history.AlgoFixed, Limit: limit, Window: window}
}

func slidingCfg(limit int64, window time.Duration, segments int64) LimitConfig {
	return LimitConfig{Algo: history.AlgoSliding, Limit: limit, Window: window, Segments: segments}
}

func bucketCfg(burst, rate int64, period time.Duration) LimitConfig {
	return LimitConfig{Algo: history.AlgoBucket, Burst: burst, Rate: rate, Period: period}
}

// rateDrift is the checker's allowance for the server's clock against real
// time (both the local machine's here).
var rateDrift = models.Options{Drift: 10 * time.Millisecond}

func rateProps(hazard bool) []Property {
	p := Property{Checker: "rate-limit"}
	if hazard {
		p.Expect, p.Hazards = MayHazard, []string{models.KindOverLimit}
	}
	return []Property{p}
}

// rateScenario registers ratelimit/<algo>/<fault>.
func rateScenario(fault, summary string, topo Topology, cfg LimitConfig, nemesis func(*rand.Rand, time.Duration, time.Duration) []Event, hazard bool) {
	Register(&Scenario{
		Name:    "ratelimit/" + cfg.Algo + "/" + fault,
		Summary: fmt.Sprintf("%s (%s) %s", cfg.Algo, describeLimit(cfg), summary),
		Topo:    topo, Workload: rateWorkload(cfg, 0.1), Nemesis: nemesis,
		Properties: rateProps(hazard), Check: rateDrift,
		Impls: limiterImplsFor(cfg.Algo), Algo: cfg.Algo,
		// go-redis's default 3s timeouts, as the limiters' users have them.
		ClientTimeout: 3 * time.Second,
	})
}

func describeLimit(c LimitConfig) string {
	switch c.Algo {
	case history.AlgoFixed:
		return fmt.Sprintf("%d per %v", c.Limit, c.Window)
	case history.AlgoSliding:
		return fmt.Sprintf("%d per %v in %d segments", c.Limit, c.Window, c.Segments)
	}
	return fmt.Sprintf("burst %d, %d per %v", c.Burst, c.Rate, c.Period)
}

// rateKillRestart kills the server every gap (± gap/2) and restarts it
// without persistence after hold; each restart that lost the dataset is the
// effect (the canary written just before the kill is gone).
func rateKillRestart(gap, hold time.Duration) func(*rand.Rand, time.Duration, time.Duration) []Event {
	return func(r *rand.Rand, d, _ time.Duration) []Event {
		before := int64(-1)
		return every(r, d, gap, hold, "kill -9 the server",
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
}

// rateFailoverForced cuts replication n2↔n1 at d/4, and after behind has
// the sentinels fail over to the lagging replica; the proof of the loss is
// the replication offsets (the old primary reached more, as a primary, than
// the new one took over with).
func rateFailoverForced(behind time.Duration) func(*rand.Rand, time.Duration, time.Duration) []Event {
	return func(_ *rand.Rand, d, _ time.Duration) []Event {
		at := d / 4
		return []Event{
			{At: at, Name: "cut replication n2↔n1", Kind: models.NemesisFault, Do: func(_ context.Context, e *Env) error { return e.Topo.Partition("n2", "n1") }},
			sentinelFailoverAt(at+behind, fmt.Sprintf("SENTINEL FAILOVER (forced, replica %v behind)", behind)),
			{At: at + behind + 500*time.Millisecond, Name: "heal", Kind: models.NemesisHeal, Do: func(_ context.Context, e *Env) error { return e.Topo.HealAll() }},
		}
	}
}

// rateClockJump restarts the server (with AOF: the limiters' state
// survives) with its wall clock moved by off at d/3; a forward jump is the
// effect once the server's TIME reads it.
func rateClockJump(off func(LimitConfig) time.Duration, cfg LimitConfig) func(*rand.Rand, time.Duration, time.Duration) []Event {
	jump := off(cfg)
	name := fmt.Sprintf("restart the server with its clock %v ahead", jump)
	if jump < 0 {
		name = fmt.Sprintf("restart the server with its clock %v behind", -jump)
	}
	return func(_ *rand.Rand, d, _ time.Duration) []Event {
		return []Event{{At: d / 3, Name: name, Do: func(ctx context.Context, e *Env) error {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			if err := e.Topo.SetClockOffset(sctx, "n1", jump); err != nil {
				return err
			}
			// The jump must have happened: a server whose clock did not move
			// leaves the scenario untested (UNKNOWN), never a PASS.
			skew, err := serverSkew(sctx, e.Topo.Node("n1"))
			if err != nil {
				return err
			}
			if (jump > 0 && skew < jump/2) || (jump < 0 && skew > jump/2) {
				return fmt.Errorf("the server's clock reads %v from real time, not %v: the jump did not happen", skew, jump)
			}
			if jump > 0 {
				// The proof a violation needs to count as the hazard.
				e.EffectExplaining(models.LeaseLossKinds, "n1's clock reads %v from real time", skew)
			} else {
				// A backward jump must hold: noted, not an effect a
				// violation could be blamed on.
				e.Note("the server's clock reads %v from real time", skew)
			}
			return nil
		}}}
	}
}

func init() {
	standalone := Topology{Kind: testbed.KindStandalone}
	replicated := Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3}
	base := []LimitConfig{fixedCfg(10, 500*time.Millisecond), slidingCfg(10, 500*time.Millisecond, 5),
		// A bucket that takes 2s to refill: a loss or a jump that gives the
		// bucket back full gives more than a restart's or a failover's
		// downtime would have refilled.
		bucketCfg(20, 10, time.Second)}
	for _, cfg := range base {

		rateScenario("baseline", "no faults; 8 processes hammer two shared keys, with clocks that disagree. The bound must hold.",
			standalone, cfg, nil, false)
		rateScenario("partition-client", "one client at a time is cut off (silently) from the server and healed: its "+
			"requests hang or time out (unknown outcome). The bound must hold.",
			standalone, cfg, func(r *rand.Rand, d, _ time.Duration) []Event {
				return partitionClients(r, d, 1500*time.Millisecond, 700*time.Millisecond)
			}, false)
		rateScenario("latency", "every client link gets 20ms ± 20ms latency at times: grants arrive late. The bound must hold.",
			standalone, cfg, func(r *rand.Rand, d, _ time.Duration) []Event {
				return every(r, d, 2*time.Second, time.Second, "latency on client links",
					latencyOnEveryClientLink("n1", 20*time.Millisecond, 20*time.Millisecond), healAll)
			}, false)
		rateScenario("pause-primary", "the server is stopped (SIGSTOP) for 800ms and continued: requests queue up and "+
			"run at once. The bound must hold.",
			standalone, cfg, func(r *rand.Rand, d, _ time.Duration) []Event {
				return every(r, d, 2*time.Second, 800*time.Millisecond, "pause the server",
					func(_ context.Context, e *Env, _ *rand.Rand) error { return e.Topo.Pause("n1") },
					func(_ context.Context, e *Env, _ *rand.Rand) error { return e.Topo.Resume("n1") })
			}, false)
		rateScenario("baseline-cluster", "on a 3-primary cluster (cluster clients; each key's limiter on its slot's "+
			"owner). The bound must hold.", clusterTopo, cfg, nil, false)

	}

	// Faults that lose grants: a restart without persistence, a failover to
	// a replica behind. What each algorithm can show differs (the summaries
	// say how); the windows are scaled so that one loss is visible.
	rateScenario("kill-restart-noaof", "the server is killed -9 about every 800ms and restarted without "+
		"persistence: the counter restarts from zero. One loss admits one more limit within a window, which the "+
		"fixed window's own bound (2·limit in any span shorter than the window) absorbs; with a 2s window two losses "+
		"fall in one window and three limits' worth of grants come within it — when the grants come at the right "+
		"moments, which a loaded machine may not give: may show HAZARD (over-limit, after a restart proven to have "+
		"lost the dataset), or PASS with the hazard not shown.",
		standalone, fixedCfg(10, 2*time.Second), rateKillRestart(800*time.Millisecond, 150*time.Millisecond), true)
	rateScenario("kill-restart-noaof", "the server is killed -9 and restarted without persistence: the segments' counts "+
		"vanish and a full limit is granted again within the window. HAZARD expected (over-limit, after a restart "+
		"proven to have lost the dataset).",
		standalone, slidingCfg(10, time.Second, 5), rateKillRestart(1500*time.Millisecond, 200*time.Millisecond), true)
	rateScenario("kill-restart-noaof", "the server is killed -9 and restarted without persistence: the bucket comes "+
		"back full (20) where the downtime refilled about 2. HAZARD expected (over-limit, after a restart proven to "+
		"have lost the dataset).",
		standalone, bucketCfg(20, 10, time.Second), rateKillRestart(1500*time.Millisecond, 200*time.Millisecond), true)

	rateScenario("failover-forced", "replication to the replica is cut, and 1s later the sentinels fail over to it: "+
		"the new primary lacks the last second of counts. A fixed window's loss is at most one limit in a window, "+
		"which its bound (2·limit in any span shorter than the window) absorbs: the hazard may show or not. May show "+
		"HAZARD (over-limit after a failover proven to have lost writes).",
		replicated, fixedCfg(10, 2*time.Second), rateFailoverForced(time.Second), true)
	rateScenario("failover-forced", "replication to the replica is cut, and 1s later the sentinels fail over to it: "+
		"the new primary lacks the last second of grants and grants them again within the window. HAZARD expected "+
		"(over-limit after a failover proven to have lost writes).",
		replicated, slidingCfg(10, 2*time.Second, 5), rateFailoverForced(time.Second), true)
	rateScenario("failover-forced", "replication to the replica is cut, and 1s later the sentinels fail over to it: "+
		"the new primary's bucket lacks the last second's grants and hands them out again. HAZARD expected "+
		"(over-limit after a failover proven to have lost writes).",
		replicated, bucketCfg(20, 10, time.Second), rateFailoverForced(time.Second), true)

	// Server clock jumps. Decisions follow the server's clock (TIME, and
	// the server's own key expiry), so a jump moves every limiter's time.
	aof := Topology{Kind: testbed.KindStandalone, AOF: true}
	ahead := func(c LimitConfig) time.Duration { return 4 * c.span() }
	behind := func(c LimitConfig) time.Duration { return -4 * c.span() }
	for _, cfg := range base {
		var fwd, back string
		switch cfg.Algo {
		case history.AlgoFixed:
			fwd = "the window's counter expires by the server's clock, at once: a new window opens early. That is one " +
				"window's loss, which the fixed window's own bound (2·limit in any span shorter than the window) absorbs " +
				"when grants come at the windows' starts: the hazard may show or not"
			back = "the counter's expiry moves 4 windows later: the window lasts longer (stricter)"
		case history.AlgoSliding:
			fwd = "every segment's count falls out of the window at once: a full limit is granted again early"
			back = "the stored segments lie in the server's future: they count longer (stricter)"
		default:
			fwd = "the refill sees 4 periods elapsed: the bucket is full again at once"
			back = "the refill sees negative time elapsed: no tokens come back until the clock catches up (stricter)"
		}
		rateScenario("clock-skew", "the server restarts (with AOF: the limiters' state survives) with its clock 4 "+
			"windows ahead: "+fwd+". Permits come back early: over-admission is the clock-jump hazard (HAZARD: "+
			"over-limit once the server's clock is proven ahead).", aof, cfg, rateClockJump(ahead, cfg), true)
		rateScenario("clock-skew-back", "the server restarts (with AOF) with its clock 4 windows behind: "+back+
			". A backward jump never frees permits: the bound must hold.", aof, cfg, rateClockJump(behind, cfg), false)
	}
}
