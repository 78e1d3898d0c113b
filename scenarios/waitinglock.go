package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The waiting-lock family: clients wait for the lock with the
// implementation's waiting acquisition (Waiter; prim's invalidation-driven
// AcquireFencedLock), hold it briefly, write with its token and release.
// Liveness (a free lock is taken within the wake bound, or by the lease's
// expiry when notifications were lost) joins the lock properties.

// coordinators keeps one prim.Coordinator per client for the run (the
// hash-lease workload's), and the run's waiting acquisitions.
type coordinators struct {
	mu      sync.Mutex
	m       map[int]*prim.Coordinator
	waiting Waiting
}

func (e *Env) coordinator(proc int) *prim.Coordinator {
	e.coords.mu.Lock()
	defer e.coords.mu.Unlock()
	if e.coords.m == nil {
		e.coords.m = map[int]*prim.Coordinator{}
	}
	c := e.coords.m[proc]
	if c == nil {
		c = prim.New(e.Clients[proc], prim.WithLogger(e.Log))
		e.coords.m[proc] = c
	}
	return c
}

// waiting returns the run's waiting acquisitions of the implementation under
// test, or nil if it cannot wait (Supports refuses such a run).
func (e *Env) waiting() Waiting {
	e.coords.mu.Lock()
	defer e.coords.mu.Unlock()
	if e.coords.waiting == nil {
		w, ok := e.Impl.(Waiter)
		if !ok {
			return nil
		}
		e.coords.waiting = w.Waiting(e.Log)
	}
	return e.coords.waiting
}

func (e *Env) closeCoordinators() {
	e.coords.mu.Lock()
	defer e.coords.mu.Unlock()
	for _, c := range e.coords.m {
		c.Close()
	}
	if e.coords.waiting != nil {
		e.coords.waiting.Close()
	}
}

// waitingWorkload is one client: wait for the lock, hold it briefly, write
// with its token, release.
func waitingWorkload(ctx context.Context, env *Env, proc int) { waitingLoop(ctx, env, proc, 0) }

// abandoningWorkload is waitingWorkload whose holders crash now and then:
// one acquisition in abandonEvery never writes nor releases, and its process
// stays away for 3 to 5 leases, so the lease lapses with every other client
// waiting.
func abandoningWorkload(ctx context.Context, env *Env, proc int) {
	waitingLoop(ctx, env, proc, 1.0/abandonEvery)
}

// abandonEvery is how many acquisitions, on average, a holder makes per
// abandoned lease.
const abandonEvery = 20

func waitingLoop(ctx context.Context, env *Env, proc int, abandon float64) {
	r := env.Rand(proc)
	wt := env.waiting()
	if wt == nil {
		return
	}
	c := env.Clients[proc]
	rec := env.Rec
	for ctx.Err() == nil {
		if _, err := rec.Invoke(proc, history.Op{F: history.FAcquireWait, Key: lockKey, TTLMs: env.TTL.Milliseconds()}); err != nil {
			return
		}
		actx, cancel := context.WithTimeout(ctx, 10*env.TTL)
		l, err := wt.Acquire(actx, c, env.Key(lockKey), env.TTL)
		cancel()
		switch {
		case err == nil:
			rec.OK(proc, history.Op{Token: l.Token(), Owner: l.Owner(), TTLMs: env.TTL.Milliseconds()})
		case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, prim.ErrUncertain) && !errors.Is(err, ErrUncertain):
			// The wait ended before the script was sent: nothing happened.
			rec.Fail(proc, history.Op{Err: err.Error()})
			continue
		default:
			env.failed(proc, err)
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		if abandon > 0 && r.Float64() < abandon {
			// The holder crashes: its lease lapses unreleased, and the
			// process comes back (a restart) after 3 to 5 leases.
			sleep(ctx, env.TTL*time.Duration(3+r.IntN(3)))
			continue
		}
		sleep(ctx, time.Duration(2+r.IntN(10))*time.Millisecond)
		env.write(proc, l.Token(), l.Owner())
		env.release(ctx, proc, history.Op{Key: lockKey, Owner: l.Owner(), Token: l.Token()}, l.Release)
	}
}

// killWatchers kills every tracking and invalidation connection on the server:
// notifications in flight are lost, waiters must recover.
func killWatchers(ctx context.Context, e *Env) error {
	for _, n := range e.Topo.Nodes() {
		list, err := n.Admin().ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, "flags=t") || strings.Contains(line, " sub=1 ") {
				id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
				n.Admin().Do(ctx, "CLIENT", "KILL", "ID", id)
			}
		}
	}
	return nil
}

// activeExpiryOff turns the servers' active expiry off (DEBUG
// SET-ACTIVE-EXPIRE 0; the testbed enables DEBUG): a key past its ttl stays
// until a command touches it, and so does its invalidation. It proves the
// switch took: a key with a 1 ms ttl, in a database the workload does not
// use, is still counted 200 ms later (active expiry would have removed it).
func activeExpiryOff(ctx context.Context, e *Env) error {
	for _, n := range e.Topo.Nodes() {
		if err := n.Admin().Do(ctx, "DEBUG", "SET-ACTIVE-EXPIRE", "0").Err(); err != nil {
			return fmt.Errorf("%s: DEBUG SET-ACTIVE-EXPIRE 0: %w", n.Name, err)
		}
		// A connection of its own, never returned to the admin pool: a
		// pooled one would go back with the canary database selected, and
		// later admin reads (the leak scan) would look at the wrong one.
		cn := n.Admin().EphemeralConn()
		err := func() error {
			defer cn.Close()
			if err := cn.Select(ctx, canaryDB).Err(); err != nil {
				return err
			}
			if err := cn.Set(ctx, "coordtorture:expiry-canary", "1", time.Millisecond).Err(); err != nil {
				return err
			}
			sleep(ctx, 200*time.Millisecond)
			k, err := cn.DBSize(ctx).Result()
			if err != nil {
				return err
			}
			if k == 0 {
				return errors.New("a key with a 1 ms ttl was removed within 200 ms: active expiry is still on")
			}
			return cn.FlushDB(ctx).Err()
		}()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		e.Note("%s: a key 200 ms past its ttl still stored", n.Name)
	}
	return nil
}

// canaryDB is the database activeExpiryOff proves the switch in.
const canaryDB = 9

// The waiting-lock properties: everything must hold without faults; across a
// failover liveness must hold and the rest may show the asynchronous-failover
// hazard (waiters may have to wait out lost notifications).
var (
	waitingProps = []Property{{Checker: "fenced-resource"}, {Checker: "token-order"}, {Checker: "exclusion"},
		{Checker: "lease-protocol"}, {Checker: "liveness"}}
	waitingFailoverProps = []Property{{Checker: "fenced-resource", Expect: MayHazard}, {Checker: "token-order", Expect: MayHazard},
		{Checker: "exclusion", Expect: MayHazard}, {Checker: "lease-protocol", Expect: MayHazard}, {Checker: "liveness"}}
	waitingCheck         = models.Options{Drift: 20 * time.Millisecond, WakeBound: 500 * time.Millisecond}
	waitingFailoverCheck = models.Options{Drift: 20 * time.Millisecond, WakeBound: 2 * time.Second, LostNotifications: true}
)

func init() {
	props := waitingProps
	Register(&Scenario{
		Name:       "waiting-lock/handoff",
		Summary:    "clients wait on invalidations for the lock and hand it on; no faults. Everything, liveness included, must hold.",
		Topo:       Topology{Kind: testbed.KindStandalone},
		Workload:   waitingWorkload,
		Properties: props,
		Check:      waitingCheck,
		Impls:      []string{"prim"},
		Waits:      true,
	})
	Register(&Scenario{
		Name: "waiting-lock/lost-notifications",
		Summary: "the server's tracking and invalidation connections are killed and the clients' links cut now and then; " +
			"waiters must still take a free lock, by the lease's expiry at the latest. Everything must hold.",
		Topo:     Topology{Kind: testbed.KindStandalone},
		Workload: waitingWorkload,
		Nemesis: func(r *rand.Rand, d, _ time.Duration) []Event {
			var evs []Event
			for at := 700 * time.Millisecond; at < d; at += time.Second + time.Duration(r.Int64N(int64(time.Second))) {
				evs = append(evs, Event{At: at, Name: "kill tracking connections", Do: killWatchers})
			}
			evs = append(evs, partitionClients(r, d, 2500*time.Millisecond, 400*time.Millisecond)...)
			return evs
		},
		Properties: props,
		// A killed tracking connection is back within the wake bound: progress
		// is judged from a second after each kill and heal (the default 2s,
		// with kills every 1-2s, left only the time before the first one).
		Check: models.Options{Drift: 20 * time.Millisecond, WakeBound: time.Second, LostNotifications: true, RecoverBound: time.Second},
		Impls: []string{"prim"},
		Waits: true,
	})
	Register(&Scenario{
		Name: "waiting-lock/abandoned-holders",
		Summary: "active expiry is off on the server and holders crash now and then, leaving their lease to lapse with " +
			"every other client waiting: an expired key is removed, and its invalidation sent, only when a command " +
			"touches it, so only the waiters' own wake-up at the holder's deadline takes the lock in time. Everything, " +
			"liveness included (a lapsed lease taken within the bound after its expiry), must hold.",
		Topo:     Topology{Kind: testbed.KindStandalone},
		Workload: abandoningWorkload,
		Nemesis: func(*rand.Rand, time.Duration, time.Duration) []Event {
			return []Event{{At: 0, Name: "active expiry off", Do: activeExpiryOff}}
		},
		Properties: props,
		// Turning active expiry off degrades nothing the workload needs
		// recovering from: progress is judged from shortly after it (the
		// default 2 s after an event would leave too few operations).
		Check: models.Options{Drift: waitingCheck.Drift, WakeBound: waitingCheck.WakeBound, RecoverBound: 250 * time.Millisecond},
		Impls: []string{"prim"},
		Waits: true,
	})
	Register(&Scenario{
		Name: "waiting-lock/failover",
		Summary: "waiters sleep on invalidations from the primary while the sentinels fail over; the old primary drops its " +
			"connections, the watchers follow the new one. Liveness must hold; token order, exclusion and the " +
			"resource (a token reused by a second owner) may show the asynchronous-failover hazard.",
		Topo:       Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3},
		Workload:   waitingWorkload,
		Nemesis:    sentinelFailover,
		Properties: waitingFailoverProps,
		Check:      waitingFailoverCheck,
		Impls:      []string{"prim"},
		Waits:      true,
	})
}
