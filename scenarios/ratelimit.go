package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// The ratelimit family: ratelimit/<algo>/<fault>. Every client process
// hammers a few shared limiter keys with requests for 1-3 permits (Allow,
// and Wait where the implementation can), each recorded with its limiter's
// configuration; the rate-limit checker holds the grants to the algorithm's
// bound over spans of every length, and the denials to the algorithm's own
// state (models.CheckRateLimit: a denial the state had to allow is
// wrongly-limited). A denial is a fail without an error; a request one of
// whose attempts lost its reply (the implementation or go-redis resent it)
// is info whatever it answered, since the lost attempt may have consumed
// (replyWatch). The keys change every three windows (a new
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

// burstCycle is the bursts scenarios' cycle, in windows (or periods): the
// processes hammer the limiter during the first and sit idle for the rest.
// Their keys last burstEpoch windows, so a limiter meets its own state
// again after each gap.
const (
	burstCycle = 4
	burstEpoch = 4 * burstCycle
)

// rateWorkload is one client process of the ratelimit family; bursts: the
// processes request only in the first window of every burstCycle.
func rateWorkload(cfg LimitConfig, waitShare float64, bursts bool) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		r := env.Rand(proc)
		c := env.Clients[proc]
		clock := clockOf(proc, cfg)
		limiters := map[string]Limiter{}
		// The process's connection, made before its first request: a dial
		// during a request is a reconnection (replyHook).
		c.AddHook(replyHook{})
		_ = c.Ping(ctx).Err()
		epoch := 3 * cfg.span()
		if bursts {
			epoch = burstEpoch * cfg.span()
		}
		for ctx.Err() == nil {
			if now := time.Duration(env.Rec.Now()); bursts && now%(burstCycle*cfg.span()) >= cfg.span() {
				sleep(ctx, burstCycle*cfg.span()-now%(burstCycle*cfg.span()))
				continue
			}
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
			var retry time.Duration
			watch := &replyWatch{}
			rctx := context.WithValue(ctx, replyWatchKey{}, watch)
			if op.F == history.FAllowWait {
				// A wait is bounded by half a window (or period): permits
				// come back within it, and a process does not spend the run
				// waiting while the others hammer the key.
				wctx, cancel := context.WithTimeout(rctx, cfg.span()/2)
				ok, err = w.Wait(wctx, n)
				cancel()
			} else if lr, has := l.(LimiterRetry); has {
				ok, retry, err = lr.AllowRetry(rctx, n)
			} else {
				ok, err = l.Allow(rctx, n)
			}
			switch {
			case err != nil:
				env.failed(proc, err)
				sleep(ctx, 5*time.Millisecond)
			case watch.lost.Load():
				// An attempt went without its reply and was resent (by the
				// implementation, or inside go-redis): the lost attempt may
				// have consumed permits whatever the answer, so neither a
				// grant's weight nor a denial's "nothing consumed" is
				// certain.
				env.Rec.Info(proc, history.Op{Err: fmt.Sprintf("answered %s after a lost reply: an attempt that went unanswered may have consumed permits", map[bool]string{true: "granted", false: "denied"}[ok])})
			case ok:
				env.Rec.OK(proc, history.Op{})
			default:
				// A denial, with the RetryAfter answered (µs; none: 0).
				env.Rec.Fail(proc, history.Op{Count: retry.Microseconds()})
			}
			sleep(ctx, pause)
		}
	}
}

// replyWatch marks a request during which an attempt may have run without
// its reply reaching the client: a command that ended with an error that is
// not the server's answer (a timeout, a dropped connection), or a
// connection dialed (go-redis resends a command whose reply was lost on a
// new connection, within the one call a hook sees). Its answer then says
// nothing certain of what the lost attempt consumed: the workload records
// it as info.
type replyWatch struct{ lost atomic.Bool }

type replyWatchKey struct{}

// replyHook sets the replyWatch of the request's context (see replyWatch).
type replyHook struct{}

func watchOf(ctx context.Context) *replyWatch {
	w, _ := ctx.Value(replyWatchKey{}).(*replyWatch)
	return w
}

// noReply reports an error that is not the server's answer.
func noReply(err error) bool {
	var re redis.Error
	return err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &re)
}

func (replyHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if w := watchOf(ctx); w != nil {
			w.lost.Store(true)
		}
		return next(ctx, network, addr)
	}
}

func (replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if w := watchOf(ctx); w != nil && noReply(err) {
			w.lost.Store(true)
		}
		return err
	}
}

func (replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if w := watchOf(ctx); w != nil {
			for _, c := range cmds {
				if noReply(c.Err()) {
					w.lost.Store(true)
				}
			}
		}
		return err
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

// rateProps: the rate-limit property, which may show the hazard kinds
// given (none: it must hold).
func rateProps(hazards ...string) []Property {
	p := Property{Checker: "rate-limit"}
	if len(hazards) > 0 {
		p.Expect, p.Hazards = MayHazard, hazards
	}
	return []Property{p}
}

// rateScenario registers ratelimit/<algo>/<fault>.
func rateScenario(fault, summary string, topo Topology, cfg LimitConfig, nemesis func(*rand.Rand, time.Duration, time.Duration) []Event, hazard bool) {
	var hz []string
	if hazard {
		hz = []string{models.KindOverLimit}
	}
	rateScenarioKinds(fault, summary, topo, cfg, nemesis, hz...)
}

// rateScenarioKinds is rateScenario with the hazard kinds its property may
// show.
func rateScenarioKinds(fault, summary string, topo Topology, cfg LimitConfig, nemesis func(*rand.Rand, time.Duration, time.Duration) []Event, hazards ...string) {
	Register(&Scenario{
		Name:    "ratelimit/" + cfg.Algo + "/" + fault,
		Summary: fmt.Sprintf("%s (%s) %s", cfg.Algo, describeLimit(cfg), summary),
		Topo:    topo, Workload: rateWorkload(cfg, 0.1, strings.HasPrefix(fault, "bursts")), Nemesis: nemesis,
		Properties: rateProps(hazards...), Check: rateDrift,
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
		return fitting(d, []Event{
			{At: at, Name: "cut replication n2↔n1", Kind: models.NemesisFault, Do: func(_ context.Context, e *Env) error { return e.Topo.Partition("n2", "n1") }},
			sentinelFailoverAt(at+behind, fmt.Sprintf("SENTINEL FAILOVER (forced, replica %v behind)", behind)),
			{At: at + behind + 500*time.Millisecond, Name: "heal", Kind: models.NemesisHeal, Do: func(_ context.Context, e *Env) error { return e.Topo.HealAll() }},
		})
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
				// A backward jump frees nothing: the bound must hold. It
				// delays permits (the windows' state lasts longer, the
				// bucket refills nothing until the clock catches up): the
				// denials it causes are its hazard, no over-admission.
				e.EffectExplaining([]string{models.KindWronglyLimited}, "n1's clock reads %v from real time", skew)
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

	// Idle gaps, a cycle a second: a quarter-second window or period.
	for _, cfg := range []LimitConfig{fixedCfg(10, 250*time.Millisecond), slidingCfg(10, 250*time.Millisecond, 5),
		bucketCfg(20, 10, 250*time.Millisecond)} {
		rateScenario("bursts", "no faults; the processes request together for one window (or period) and sit idle "+
			"for three, on keys that last four such cycles: after every gap the limiter's state must allow what it "+
			"did at first (wrongly-limited otherwise: a limiter that never refills), and a bucket must not have "+
			"filled past its burst (over-limit). Both must hold.", standalone, cfg, nil, false)
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
		rateScenarioKinds("clock-skew-back", "the server restarts (with AOF) with its clock 4 windows behind: "+back+
			". A backward jump never frees permits: the bound must hold (over-limit is FAIL). It delays them: requests "+
			"the state would have allowed are denied until the clock catches up (HAZARD: wrongly-limited once the "+
			"server's clock is proven behind).", aof, cfg, rateClockJump(behind, cfg), models.KindWronglyLimited)
	}
}
