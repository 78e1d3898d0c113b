package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The latch family: latch/<fault>. The workload runs rounds. In each, the
// leader (process 0) creates (or resets, which creates a missing key) a
// latch of a fresh key with a count; half of the other processes (the
// counters) join it and count it down once each, the rest (the waiters)
// join it and wait for it, each wait bounded. When every participant is
// done, the leader deletes the key (as a user does: prim never deletes a
// latch) and starts the next round. Counts vary: sometimes one signal short
// of the counters (the last one finds the generation complete), sometimes
// 0 (already complete). In the reset-race rounds the leader also resets the
// key while the others signal and wait: old waiters must wake with false,
// old signals must return -1, and the participants join the new generation
// and go on; the leader completes the last generation itself. The latch
// checker (models.CheckLatch) judges every answer, completions included
// (a wait that ran out its bound after its generation reached zero lost
// its completion), the leak scan finds nothing of a deleted latch.

// latchPrefix begins every latch key of the family (the leak scan's key).
const latchPrefix = "latch:"

// latchCfg is one latch scenario's workload.
type latchCfg struct {
	// resets: the leader resets the round's latch while it runs.
	resets bool
	// signalDelay is the most a participant waits, at random, before it
	// joins and before it counts down.
	signalDelay time.Duration
	// waitBound bounds each wait; a wait that runs it out is recorded as a
	// fail (nothing changed), which the checker holds to WakeBound.
	waitBound time.Duration
}

// latchShared is the state one run's latch processes share (Env.latch).
type latchShared struct {
	once sync.Once
	run  *latchRun
}

// latchRun is one run's rounds and the generations seen.
type latchRun struct {
	mu    sync.Mutex
	gens  map[string]int64 // generation id → its number in the history
	next  int64
	round *latchRound
	pub   chan struct{} // closed when a round is published, or the rounds end
	ended bool          // the leader has stopped: no more rounds
}

// latchRound is one round: its key and the participants still in it.
type latchRound struct {
	n                 int
	name              string // the history's key (the server's: Env.Key(name))
	counters, waiters sync.WaitGroup
}

func (e *Env) latchRun() *latchRun {
	e.latch.once.Do(func() { e.latch.run = &latchRun{gens: map[string]int64{}, pub: make(chan struct{})} })
	return e.latch.run
}

// gen numbers generation ids in the order the run first sees them: the
// leader creates and resets one after another, and a join can only see a
// generation already written, so the numbers follow the server's order.
func (r *latchRun) gen(id string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.gens[id]; ok {
		return g
	}
	r.next++
	r.gens[id] = r.next
	return r.next
}

func (r *latchRun) publish(rd *latchRound) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.round = rd
	close(r.pub)
	r.pub = make(chan struct{})
}

// end says the leader has stopped: the participants waiting for a round
// leave.
func (r *latchRun) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.ended = true
		close(r.pub)
	}
}

// await returns the first round after last once published (taken false when
// ctx ended first: the caller leaves it at once), or nil once the leader has
// stopped. Only the leader ends the rounds, so a round it publishes as ctx
// ends is always left, never waited for in vain.
func (r *latchRun) await(last int) (rd *latchRound, ended bool) {
	for {
		r.mu.Lock()
		rd, pub, ended := r.round, r.pub, r.ended
		r.mu.Unlock()
		if rd != nil && rd.n > last {
			return rd, false
		}
		if ended {
			return nil, true
		}
		<-pub
	}
}

// latchRoles: process 0 leads; the first half of the others count down, the
// rest wait.
func latchCounters(procs int) int { return procs / 2 }

func isLatchWaiter(proc, procs int) bool { return proc > latchCounters(procs) }

func latchWaiters(procs int) int { return procs - 1 - latchCounters(procs) }

// latchWorkload is one process of the latch family.
func latchWorkload(cfg latchCfg) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		lc := env.Latch.Latches(env.Clients[proc], env.Log)
		defer lc.Close()
		run := env.latchRun()
		switch {
		case proc == 0:
			latchLeader(ctx, env, lc, run, cfg)
		default:
			latchParticipant(ctx, env, lc, run, cfg, proc)
		}
	}
}

// latchLeader runs the rounds.
func latchLeader(ctx context.Context, env *Env, lc LatchClient, run *latchRun, cfg latchCfg) {
	const proc = 0
	r := env.Rand(proc)
	procs := len(env.Clients)
	counters := int64(latchCounters(procs))
	defer run.end()
	for n := 1; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("%s%d", latchPrefix, n)
		count := counters
		switch x := r.IntN(10); {
		case x == 0:
			count = 0 // complete from the start
		case x == 1 && counters > 0:
			count = counters - 1 // one signal too many
		}
		f := history.FLatchCreate
		if r.IntN(2) == 0 {
			f = history.FLatchReset // on a missing key: a create
		}
		resets := 0
		if cfg.resets {
			resets = 1 + r.IntN(2)
		}
		pauses := make([]time.Duration, resets)
		for k := range pauses {
			pauses[k] = randDur(r, cfg.signalDelay)
		}
		pause := time.Duration(r.IntN(5000)) * time.Microsecond
		l, set := env.latchSet(ctx, proc, lc, run, f, name, count)
		if l == nil {
			if set != history.Fail {
				env.latchDelete(ctx, proc, lc, name) // it may exist
			}
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		rd := &latchRound{n: n, name: name}
		rd.counters.Add(int(counters))
		rd.waiters.Add(latchWaiters(procs))
		run.publish(rd)
		if cfg.resets {
			for _, p := range pauses {
				sleep(ctx, p)
				if nl, _ := env.latchSet(ctx, proc, lc, run, history.FLatchReset, name, counters); nl != nil {
					l = nl
				}
			}
			// The counters may have signalled older generations: the leader
			// completes the current one itself.
			env.latchWaitGroup(ctx, &rd.counters, cfg)
			if jl := env.latchJoin(ctx, proc, lc, run, name); jl != nil {
				l = jl
			}
			for k := int64(0); k <= counters && ctx.Err() == nil; k++ {
				if left, ok := env.latchCountDown(ctx, proc, run, name, l); !ok || left <= 0 {
					break
				}
			}
		}
		env.latchWaitGroup(ctx, &rd.counters, cfg)
		env.latchWaitGroup(ctx, &rd.waiters, cfg)
		env.latchDelete(ctx, proc, lc, name)
		sleep(ctx, pause)
	}
}

// latchWaitGroup waits for a round's participants, a bounded time (a
// participant's waits are bounded; one that ends with the run leaves at
// once).
func (e *Env) latchWaitGroup(ctx context.Context, wg *sync.WaitGroup, cfg latchCfg) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(3*cfg.waitBound + 5*time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		e.Log.Warn("coordtorture: latch round participants did not finish in time")
	}
}

// latchParticipant counts down or waits, once a round.
func latchParticipant(ctx context.Context, env *Env, lc LatchClient, run *latchRun, cfg latchCfg, proc int) {
	r := env.Rand(proc)
	waiter := isLatchWaiter(proc, len(env.Clients))
	last := 0
	for {
		rd, ended := run.await(last)
		if ended {
			return
		}
		wg := &rd.counters
		if waiter {
			wg = &rd.waiters
		}
		last = rd.n
		if ctx.Err() != nil {
			wg.Done() // the run ended before this process took part
			continue
		}
		before, between := randDur(r, cfg.signalDelay), randDur(r, cfg.signalDelay)
		func() {
			defer wg.Done()
			sleep(ctx, before)
			l := env.latchJoin(ctx, proc, lc, run, rd.name)
			// A signal or wait of a replaced generation joins the current
			// one and goes on, a few times at most.
			for try := 0; l != nil && try < 3 && ctx.Err() == nil; try++ {
				if waiter {
					if done, ok := env.latchWait(ctx, proc, run, rd.name, l, cfg.waitBound); !ok || done {
						return
					}
				} else {
					if try == 0 {
						sleep(ctx, between)
					}
					if left, ok := env.latchCountDown(ctx, proc, run, rd.name, l); !ok || left != -1 {
						return
					}
				}
				l = env.latchJoin(ctx, proc, lc, run, rd.name)
			}
		}()
	}
}

func randDur(r *rand.Rand, most time.Duration) time.Duration {
	if most <= 0 {
		return 0
	}
	return time.Duration(r.Int64N(int64(most)))
}

// latchSet records a create or reset (f) of name with count: the latch when
// ok, else nil and the record's type (fail: nothing written).
func (e *Env) latchSet(ctx context.Context, proc int, lc LatchClient, run *latchRun, f, name string, count int64) (Latch, history.Type) {
	if _, err := e.Rec.Invoke(proc, history.Op{F: f, Key: name, Count: count}); err != nil {
		return nil, history.Fail
	}
	var l Latch
	var err error
	if f == history.FLatchReset {
		l, err = lc.Reset(ctx, e.Key(name), count)
	} else {
		l, err = lc.Create(ctx, e.Key(name), count)
	}
	switch {
	case err == nil:
		e.Rec.OK(proc, history.Op{Gen: run.gen(l.Generation())})
		return l, history.OK
	case errors.Is(err, prim.ErrLatchExists):
		e.Rec.Fail(proc, history.Op{Value: "exists"})
		return nil, history.Fail
	}
	e.failed(proc, err)
	if NotExecuted(err) {
		return nil, history.Fail
	}
	return nil, history.Info
}

// latchJoin records a join of name: the current generation, or nil.
func (e *Env) latchJoin(ctx context.Context, proc int, lc LatchClient, run *latchRun, name string) Latch {
	if _, err := e.Rec.Invoke(proc, history.Op{F: history.FLatchJoin, Key: name}); err != nil {
		return nil
	}
	l, err := lc.Join(ctx, e.Key(name))
	switch {
	case err == nil:
		e.Rec.OK(proc, history.Op{Gen: run.gen(l.Generation())})
		return l
	case errors.Is(err, prim.ErrNotFound):
		e.Rec.Fail(proc, history.Op{Value: "not found"})
	default:
		e.failed(proc, err)
	}
	return nil
}

// latchCountDown records one signal of l: the remaining count (-1: the
// generation was replaced) with ok, or ok false when there is none (the
// generation was complete, or the outcome is unknown).
func (e *Env) latchCountDown(ctx context.Context, proc int, run *latchRun, name string, l Latch) (int64, bool) {
	if _, err := e.Rec.Invoke(proc, history.Op{F: history.FLatchCountDown, Key: name, Gen: run.gen(l.Generation())}); err != nil {
		return 0, false
	}
	left, err := l.CountDown(ctx)
	switch {
	case err == nil:
		e.Rec.OK(proc, history.Op{Count: left})
		return left, true
	case errors.Is(err, prim.ErrLatchCompleted):
		// A definite refusal: nothing written, never below zero.
		e.Rec.Fail(proc, history.Op{Value: "completed"})
	default:
		e.failed(proc, err)
	}
	return 0, false
}

// latchWait records a wait of l bounded by bound: done is Wait's answer, ok
// false when there is none. A wait that ran out its bound (or the run) is a
// fail: nothing changed, and the checker holds it to the wake bound.
func (e *Env) latchWait(ctx context.Context, proc int, run *latchRun, name string, l Latch, bound time.Duration) (done, ok bool) {
	if _, err := e.Rec.Invoke(proc, history.Op{F: history.FLatchWait, Key: name, Gen: run.gen(l.Generation())}); err != nil {
		return false, false
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	done, err := l.Wait(wctx)
	switch {
	case err == nil:
		v := history.ValueFalse
		if done {
			v = history.ValueTrue
		}
		e.Rec.OK(proc, history.Op{Value: v})
		return done, true
	case wctx.Err() != nil && !errors.Is(err, prim.ErrUncertain) && !errors.Is(err, prim.ErrClosed):
		why := fmt.Sprintf("no answer within the wait's bound (%v)", bound)
		if ctx.Err() != nil {
			why = "no answer before the run ended"
		}
		e.Rec.Fail(proc, history.Op{Err: why})
	default:
		e.failed(proc, err)
	}
	return false, false
}

// latchDelete deletes name's latch (DEL: prim never deletes one), retrying a
// failure for a few seconds whatever ctx, so that nothing is left.
func (e *Env) latchDelete(ctx context.Context, proc int, lc LatchClient, name string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for dctx.Err() == nil {
		if _, err := e.Rec.Invoke(proc, history.Op{F: history.FLatchDelete, Key: name}); err != nil {
			return
		}
		err := e.Clients[proc].Del(dctx, e.Key(name)).Err()
		if err == nil {
			e.Rec.OK(proc, history.Op{})
			return
		}
		e.failed(proc, err)
		sleep(dctx, 100*time.Millisecond)
	}
}

// trackingClients lists the ids of n's tracking and invalidation
// connections (prim's waiters' watchers).
func trackingClients(ctx context.Context, n *testbed.Node) (map[string]bool, error) {
	list, err := n.Admin().ClientList(ctx).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		if trackingFlags.MatchString(line) || strings.Contains(line, " sub=1 ") {
			out[strings.TrimPrefix(strings.Fields(line)[0], "id=")] = true
		}
	}
	return out, nil
}

var trackingFlags = regexp.MustCompile(` flags=[A-Za-z]*t`)

// cutWaiters cuts every waiter's link to n1 now and then for hold (drop:
// everything silently lost, the connections closed at the heal; or close:
// the connections closed at once and new ones refused), while the counters
// go on: the invalidations of the count reaching zero are lost. Each heal
// proves the cut: the waiters' tracking connections the server had before
// it are gone; a cut that closed none did not happen (the event fails, and
// the run is UNKNOWN).
func cutWaiters(first, gap, hold time.Duration) func(*rand.Rand, time.Duration, time.Duration) []Event {
	return func(r *rand.Rand, d, _ time.Duration) []Event {
		var evs []Event
		k := 0
		for at := first; at+hold < d; at += gap/2 + randDur(r, gap) {
			drop := k%2 == 0
			k++
			var before map[string]bool
			name := "close the waiters' connections"
			if drop {
				name = "drop the waiters' links"
			}
			evs = append(evs,
				Event{At: at, Name: name, Kind: models.NemesisFault, Do: func(ctx context.Context, e *Env) error {
					n := e.Topo.Node("n1")
					// A watcher must be there to lose its notifications.
					for end := time.Now().Add(time.Second); ; sleep(ctx, 10*time.Millisecond) {
						var err error
						if before, err = trackingClients(ctx, n); err != nil {
							return err
						}
						if len(before) > 0 || time.Now().After(end) || ctx.Err() != nil {
							break
						}
					}
					var cut []string
					for p := range e.Clients {
						if !isLatchWaiter(p, len(e.Clients)) {
							continue
						}
						l, err := e.Topo.Link(Peer(p), "n1")
						if err != nil {
							return err
						}
						if drop {
							err = l.Partition()
						} else {
							err = l.Refuse()
						}
						if err != nil {
							return err
						}
						cut = append(cut, Peer(p))
					}
					e.Note("%v; %s open before", cut, models.Plural(int64(len(before)), "tracking connection"))
					return nil
				}},
				Event{At: at + hold, Name: "heal", Kind: models.NemesisHeal, Do: func(ctx context.Context, e *Env) error {
					if err := e.Topo.HealAll(); err != nil {
						return err
					}
					n := e.Topo.Node("n1")
					for end := time.Now().Add(2 * time.Second); ; sleep(ctx, 20*time.Millisecond) {
						now, err := trackingClients(context.WithoutCancel(ctx), n)
						if err != nil {
							return err
						}
						gone := 0
						for id := range before {
							if !now[id] {
								gone++
							}
						}
						if gone > 0 {
							e.Note("%d of the waiters' %s closed by the cut", gone, models.Plural(int64(len(before)), "tracking connection"))
							return nil
						}
						if time.Now().After(end) {
							return fmt.Errorf("the cut closed none of the %d tracking connections open before it: no notification was lost", len(before))
						}
					}
				}})
		}
		return evs
	}
}

// latchCheck: the wake bound covers a waiter's re-read without a
// notification (prim: every 2s while tracked) and a loaded machine.
var latchCheck = models.Options{WakeBound: 2500 * time.Millisecond}

func latchProps(hazard bool) []Property {
	if !hazard {
		return []Property{{Checker: "latch"}}
	}
	return []Property{
		{Checker: "latch", Expect: MayHazard, Hazards: []string{models.KindLatch, models.KindStuckWaiter}},
		{Checker: "leaks", Expect: MayHazard, Hazards: []string{models.KindLeak}},
	}
}

func init() {
	standalone := Topology{Kind: testbed.KindStandalone}
	base := latchCfg{signalDelay: 10 * time.Millisecond, waitBound: 5 * time.Second}
	Register(&Scenario{
		Name: "latch/baseline",
		Summary: "no faults; rounds of a latch counted down by half the processes and waited for by the rest, then " +
			"deleted. Every answer, every completion (within the wake bound) and the clean-up must hold.",
		Topo: standalone, Workload: latchWorkload(base),
		Properties: latchProps(false), Check: latchCheck, Impls: []string{"prim"}, Latches: true,
	})
	Register(&Scenario{
		Name: "latch/baseline-cluster",
		Summary: "latch/baseline on a 3-primary cluster (cluster clients; each round's latch on its slot's owner, " +
			"its waiters' watchers there). Everything must hold.",
		Topo: clusterTopo, Workload: latchWorkload(base),
		Properties: latchProps(false), Check: latchCheck, Impls: []string{"prim"}, Latches: true,
	})
	Register(&Scenario{
		Name: "latch/reset-race",
		Summary: "the leader resets each round's latch once or twice while the others join, count down and wait: " +
			"waiters of a replaced generation must get false, its late signals -1 (never a decrement of the new " +
			"generation, never an underflow); they join the new one and go on. Everything must hold.",
		Topo: standalone, Workload: latchWorkload(latchCfg{resets: true, signalDelay: 20 * time.Millisecond, waitBound: 5 * time.Second}),
		Properties: latchProps(false), Check: latchCheck, Impls: []string{"prim"}, Latches: true,
	})
	Register(&Scenario{
		Name: "latch/lost-notifications",
		Summary: "the waiters' links are cut for 300ms now and then (dropped, or their connections closed) while the " +
			"counters bring the count to zero: the invalidations are lost. Completion may be delayed (a re-read), never " +
			"lost: every waiter answered within the wake bound; everything must hold. Each cut is proven (the " +
			"waiters' tracking connections closed), and a count must reach zero while the waiters are cut off " +
			"(completion-cut-off: a completion whose notification was lost), else UNKNOWN.",
		Topo: standalone, Workload: latchWorkload(latchCfg{signalDelay: 100 * time.Millisecond, waitBound: 6 * time.Second}),
		Nemesis:    cutWaiters(1500*time.Millisecond, 2*time.Second, 300*time.Millisecond),
		Properties: append(latchProps(false), Property{Checker: "completion-cut-off"}),
		// A waiter cut off answers after the heal and its watcher's
		// reconnection, or its own re-read (every 2s while tracked, each
		// bounded by the cut's 300ms): 4.5s leaves a loaded machine 2s;
		// progress is judged from a second after each heal.
		Check: models.Options{WakeBound: 4500 * time.Millisecond, RecoverBound: time.Second},
		Impls: []string{"prim"}, Latches: true,
	})
	Register(&Scenario{
		Name: "latch/failover-forced",
		Summary: "replication to the replica is cut, and 500ms later the sentinels fail over to it: the new primary " +
			"lacks the last half second of signals, creations, resets and deletions. May show HAZARD (a count-down " +
			"answered twice with one remaining count, a signal or wait of a generation the new primary lost, a " +
			"completion lost, a deleted latch back: after a failover proven to have lost writes), or PASS when " +
			"nothing the latches needed was lost.",
		Topo:       Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3},
		Workload:   latchWorkload(latchCfg{signalDelay: 10 * time.Millisecond, waitBound: 5 * time.Second}),
		Nemesis:    rateFailoverForced(500 * time.Millisecond),
		Properties: latchProps(true), Check: latchCheck, Impls: []string{"prim"}, Latches: true,
	})
}
