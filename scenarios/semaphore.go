package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The semaphore family: semaphore/<fault>. Every client process contends
// for the permits of one semaphore (semCapacity of them) with TryAcquire,
// each permit leased for the run's TTL; a holder keeps its permit a while,
// sometimes renews and verifies it, and releases it. Every acquisition is
// recorded with the semaphore's capacity and its weight (one permit), so
// the semaphore checker (models.CheckSemaphore) holds the permits' validity
// windows to "never more than capacity live at once", and lease-protocol
// holds each permit's renew, verify and release answers to its own lease (no
// "held" after it was released or certainly expired, no "not held" while it
// certainly lasted). A holder that renews its permit keeps its keep-alive
// running a moment too long: once more after the release (a renewal and a
// verification racing the release, as a background renewer's does), which a
// released permit must refuse. The leak step reads
// what is left of the semaphore once every permit's TTL has elapsed, and
// the run reports prim's count of abandoned background clean-ups
// (prim.cleanup.abandoned, Outcome.Counters).

// semKey is the semaphore's key.
const semKey = "semaphore"

// semCapacity is the semaphore's capacity: 8 processes contend for 3.
const semCapacity = 3

// semWorkload is one client of the semaphore family. stall is the share of
// holders that stop (a GC pause) for stallFor(ttl) while they hold the
// permit; noExpiry is the share of acquisitions that take a permit without
// expiry (prim.NoExpiry), released like the others; crash makes process 0
// crash while it holds its first permit without expiry: it never releases it
// and does nothing more.
func semWorkload(stall float64, stallFor func(ttl time.Duration) time.Duration, noExpiry float64, crash bool) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		r := env.Rand(proc)
		c := env.Clients[proc]
		rec := env.Rec
		key := env.Key(semKey)
		for ctx.Err() == nil {
			// Every decision of this attempt is drawn first, whatever its
			// outcome: the k-th attempt of a process is the same for a seed.
			backoff := time.Duration(500+r.IntN(2000)) * time.Microsecond
			uncertainBackoff := time.Duration(5+r.IntN(20)) * time.Millisecond
			hold := env.TTL/20 + time.Duration(r.Int64N(int64(env.TTL/5)))
			stalls := r.Float64() < stall
			renews := r.Float64() < 0.3
			forever := r.Float64() < noExpiry || crash && proc == 0
			pause := time.Duration(r.IntN(3)) * time.Millisecond
			ttl, ttlMs := env.TTL, env.TTL.Milliseconds()
			if forever {
				ttl, ttlMs = prim.NoExpiry, 0
			}
			op := history.Op{F: history.FSemAcquire, Key: semKey, TTLMs: ttlMs, Capacity: semCapacity, N: 1}
			if _, err := rec.Invoke(proc, op); err != nil {
				return
			}
			p, err := env.Sem.TryAcquire(ctx, c, key, semCapacity, ttl)
			switch {
			case err == nil:
				rec.OK(proc, history.Op{Owner: p.Owner(), TTLMs: ttlMs})
				env.holding.set(proc, true)
			case errors.Is(err, ErrContended):
				rec.Fail(proc, history.Op{})
				sleep(ctx, backoff)
				continue
			default:
				env.failed(proc, err)
				sleep(ctx, uncertainBackoff)
				continue
			}
			if forever && crash && proc == 0 {
				// The crash: the holder is gone, its permit without expiry
				// stays (only a release ends it). The no-expiry-kept check
				// finds it on the server after the run.
				env.Log.Info("coordtorture: process 0 crashed holding a permit without expiry", "owner", p.Owner())
				return
			}
			if stalls {
				// The holder stops while it holds the permit; its lease may
				// run out meanwhile. It does not use the permit after the
				// pause (the checker's windows end at the lease's expiry);
				// it only releases it.
				sleep(ctx, stallFor(env.TTL))
			} else {
				sleep(ctx, hold)
			}
			if renews && !stalls && !forever {
				env.renewVerify(ctx, proc, p, history.Op{Key: semKey, Owner: p.Owner()})
			}
			released := env.release(ctx, proc, history.Op{Key: semKey, Owner: p.Owner()}, p.Release)
			if !released {
				// As a service does after a release that failed: Close
				// releases best-effort, then in the background.
				if c, ok := p.(interface{ Close() error }); ok {
					_ = c.Close()
				}
			}
			env.holding.set(proc, false)
			if released && renews && !forever && ctx.Err() == nil {
				// The late keep-alive: renew and verify the released permit
				// (both must answer "not held").
				env.renewVerify(ctx, proc, p, history.Op{Key: semKey, Owner: p.Owner()})
			}
			sleep(ctx, pause)
		}
	}
}

// semProps is the family's properties: the capacity checker (which may show
// over-capacity as the hazard of a fault that loses or expires permits),
// lease-protocol (which may show a lost permit denied to its holder there),
// and the scenario's own checks.
func semProps(hazard bool, extra ...string) []Property {
	p := Property{Checker: "semaphore"}
	lp := Property{Checker: "lease-protocol"}
	if hazard {
		p.Expect, p.Hazards = MayHazard, []string{models.KindOverCapacity}
		lp.Expect = MayHazard
	}
	out := []Property{p, lp}
	for _, e := range extra {
		out = append(out, Property{Checker: e})
	}
	return out
}

// semDrift is the checker's allowance for the server's clock against the
// harness's (both the local machine's here).
var semDrift = models.Options{Drift: 20 * time.Millisecond}

// semScenario registers semaphore/<fault>.
func semScenario(s *Scenario) {
	s.Name = "semaphore/" + s.Name
	s.Sem, s.Impls = true, []string{"prim"}
	if s.Workload == nil {
		s.Workload = semWorkload(0.1, func(ttl time.Duration) time.Duration { return ttl / 10 }, 0, false)
	}
	if s.Check == (models.Options{}) {
		s.Check = semDrift
	}
	Register(s)
}

func init() {
	standalone := Topology{Kind: testbed.KindStandalone}
	replicated := Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3}
	longStall := func(ttl time.Duration) time.Duration { return ttl + ttl/2 }

	semScenario(&Scenario{Name: "baseline",
		Summary: fmt.Sprintf("no faults; 8 processes contend for %d permits leased for the TTL, hold them briefly, "+
			"renew and verify some, and release them. Never more than %d live permits; nothing left after the TTLs.", semCapacity, semCapacity),
		Topo: standalone, Properties: semProps(false)})
	semScenario(&Scenario{Name: "partition-client",
		Summary: "one client at a time is cut off (silently) from the server for 5s and healed (a run needs 6.2s for " +
			"one cut, a shorter one is UNKNOWN): acquisitions, renewals and releases time out (unknown outcome; prim fences an uncertain " +
			"acquisition and releases it by its owner token; a failed release is followed by Close). A release and " +
			"its owner-token follow-up, Close and the clean-up's one attempt in its window (0.5s in a run), a second " +
			"each, fit in a cut, so background clean-ups give up: the run reports them (prim.cleanup.abandoned). " +
			"Never more than capacity.",
		Topo: standalone, Properties: semProps(false),
		Nemesis: semPartitionClients, Needs: semPartitionNeeds})
	semScenario(&Scenario{Name: "pause-client",
		Summary: "holders stop for 1.5× the TTL while they hold a permit (a GC pause): the permit expires and another " +
			"process takes it. The paused holder stops using a permit whose lease may have run out (it only releases " +
			"it); the capacity checker judges validity windows, which end at the lease's expiry. Never more than capacity.",
		Topo: standalone, Properties: semProps(false),
		Workload: semWorkload(0.3, longStall, 0, false), Needs: stallNeeds})
	semScenario(&Scenario{Name: "kill-restart-noaof",
		Summary: "the server is killed -9 and restarted without persistence: every live permit vanishes while its " +
			"holder still counts on it, and the next processes take the capacity again. May show HAZARD " +
			"(over-capacity after a restart proven to have lost the dataset), or PASS with the hazard not shown.",
		Topo: standalone, Properties: semProps(true),
		Nemesis: rateKillRestart(1500*time.Millisecond, 200*time.Millisecond)})
	semScenario(&Scenario{Name: "failover-forced",
		Summary: "replication to the replica is cut, and 1s later the sentinels fail over to it: the new primary " +
			"lacks the permits taken in the last second and grants them again while their holders still hold them. " +
			"May show HAZARD (over-capacity after a failover proven to have lost writes).",
		Topo: replicated, Properties: semProps(true),
		Nemesis: rateFailoverForced(time.Second)})
	semScenario(&Scenario{Name: "clock-skew",
		Summary: "the server restarts (with AOF: the permits survive) with its wall clock 4 TTLs ahead: every live " +
			"permit's deadline (server time) has passed at once, the next acquisition prunes them and the capacity is " +
			"granted again while their holders still hold them. May show HAZARD (over-capacity once the server's " +
			"clock is proven ahead).",
		Topo: Topology{Kind: testbed.KindStandalone, AOF: true}, Properties: semProps(true),
		Nemesis:    leaseClockJumps,
		NoLeakScan: "the server's clock was moved: a permit taken while it ran ahead outlives its TTL in real time"})
	semScenario(&Scenario{Name: "no-expiry-crash",
		Summary: "a fifth of the permits are taken without expiry (prim.NoExpiry) and released; process 0 crashes " +
			"holding one, which only a release would end: it stays, and the others contend for what is left. Never " +
			"more than capacity; nothing left after the TTLs but the crashed holder's permit (kept by design: " +
			"the no-expiry-kept check finds it on the server, the proof the crash happened).",
		Topo: standalone, Properties: semProps(false, "no-expiry-kept"),
		Workload: semWorkload(0.1, func(ttl time.Duration) time.Duration { return ttl / 10 }, 0.2, true),
		Reads:    map[string]Read{"no-expiry-kept": readNoExpiryKept}})
	semScenario(&Scenario{Name: "baseline-cluster",
		Summary: "on a 3-primary cluster (cluster clients; the semaphore on its slot's owner). Never more than capacity.",
		Topo:    clusterTopo, Properties: semProps(false)})
}

// semPartitionClients cuts one client (a holder, when one holds a permit)
// off from n1 for 5s, from 0.5s in and then after 1–1.5s healed each time
// (a run needs 6.2s for one cut, its schedule window 5.58s):
// long enough for a release cut at its start to fail (its second), prim's
// owner-token follow-up inside it to fail (another second), Close to fail
// (a third) and the background clean-up's one attempt in its window
// (semCleanupWindow; each attempt is bounded to a second) to give up, and
// for an acquisition cut at its start to time out and its fence to give up.
func semPartitionClients(r *rand.Rand, d, _ time.Duration) []Event {
	const hold = semCutHold
	var evs []Event
	for at := semCutAt; at+hold < d; at += hold + time.Second + time.Duration(r.Int64N(int64(time.Second/2))) {
		evs = append(evs,
			Event{At: at, Name: "partition a client", Kind: models.NemesisFault, Do: func(_ context.Context, e *Env) error {
				// A holder, when there is one: its release (or renewal)
				// meets the cut at once, so the release, its follow-up,
				// Close and the clean-up's window all run inside the cut
				// and the clean-up gives up (an idle process could start
				// them too late in the cut on a loaded machine).
				c := Peer(e.holding.pick(r, len(e.Clients)))
				e.Note("%s cut from n1", c)
				return e.Topo.Partition(c, "n1")
			}},
			Event{At: at + hold, Name: "heal partition a client", Kind: models.NemesisHeal, Do: func(ctx context.Context, e *Env) error {
				return healAll(ctx, e, r)
			}})
	}
	return evs
}

// semaphore/partition-client's first cut: at semCutAt, for semCutHold.
const (
	semCutAt   = 500 * time.Millisecond
	semCutHold = 5 * time.Second
)

// semPartitionNeeds: the first cut and its heal fit in the schedule window
// (a run of 6.2s or more); a shorter run would cut no client and is refused.
var semPartitionNeeds = needScheduled("one client is cut for 5s, from 0.5s into the run",
	func(time.Duration) time.Duration { return semCutAt + semCutHold + time.Millisecond })

// keptOwners are the owners of the crashed holders' permits without expiry
// (models.CrashedPermits): the permits the leak scan does not count.
func keptOwners(h *history.History) map[string]bool {
	kept := map[string]bool{}
	for _, op := range models.CrashedPermits(h) {
		kept[op.Owner] = true
	}
	return kept
}

// readNoExpiryKept reads, on the server after the run, each permit a
// crashed holder took without expiry (models.CrashedPermits): its score in
// the semaphore's sorted set, models.PermitKept for no deadline,
// models.PermitAbsent when it is gone. The no-expiry-kept checker judges
// them with the history (the design's promise: only a release ends such a
// permit; and the proof that the crash happened). On an external deployment
// it reads through the run's own client, as the ACL user (ZSCORE is among
// the semaphore's commands, prim.ACLSemaphore), on the primary its client
// routes to, before the run's keys are deleted.
func readNoExpiryKept(ctx context.Context, env *Env, h *history.History) []history.ServerRead {
	crashed := models.CrashedPermits(h)
	if len(crashed) == 0 {
		return nil
	}
	a, node, err := semPrimary(ctx, env)
	if err != nil {
		return []history.ServerRead{{Key: semKey, Err: "cannot read the server: " + err.Error()}}
	}
	var out []history.ServerRead
	for _, op := range crashed {
		rd := history.ServerRead{Node: node, Key: op.Key, Member: op.Owner}
		score, err := a.ZScore(ctx, env.Key(op.Key), op.Owner).Result()
		switch {
		case errors.Is(err, redis.Nil):
			rd.Reply = models.PermitAbsent
		case err != nil:
			rd.Err = err.Error()
		case math.IsInf(score, 1):
			rd.Reply = models.PermitKept
		default:
			rd.Reply = strconv.FormatFloat(score, 'f', -1, 64)
		}
		out = append(out, rd)
	}
	return out
}

// semPrimary is an admin client of the node that holds the semaphore's key
// as a primary, and the node's name; on an external deployment, the run's
// first client (its reads go to the primary), named "external".
func semPrimary(ctx context.Context, env *Env) (redis.Cmdable, string, error) {
	if env.Topo == nil {
		if len(env.Clients) == 0 {
			return nil, "", errors.New("an external deployment without a client")
		}
		return env.Clients[0], "external", nil
	}
	for _, n := range env.Topo.Nodes() {
		a := n.Admin()
		role, err := a.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			continue
		}
		if k, err := a.Exists(ctx, env.Key(semKey)).Result(); err == nil && k == 1 {
			return a, n.Name, nil
		}
	}
	return nil, "", fmt.Errorf("no primary holds %s", env.Key(semKey))
}

// permitsLeft lists the live permits of the semaphore key (a sorted set of
// permits scored with their server-time deadlines, and the capacity member
// scored -1): each permit whose deadline is still ahead of the server's
// clock, with its deadline, and each permit without expiry (+inf) but those
// in kept. kept holds the owners of the permits without expiry whose holder
// crashed (no release invoked): only a release ends such a permit, by design,
// so what a crashed holder left is no leak (the no-expiry-crash scenario
// checks that it stays); a permit without expiry left after a release was
// invoked is one.
func permitsLeft(ctx context.Context, a *redis.Client, key string, pttl int64, kept map[string]bool) ([]string, error) {
	now, err := a.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	zs, err := a.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: fmt.Sprintf("(%d", now.UnixMilli()), Max: "+inf"}).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, z := range zs {
		m, _ := z.Member.(string)
		switch {
		case !strings.HasPrefix(m, "P:") || kept[m]:
		case math.IsInf(z.Score, 1):
			out = append(out, fmt.Sprintf("%s %s (without expiry, key pttl %d ms)", key, m, pttl))
		default:
			out = append(out, fmt.Sprintf("%s %s (deadline in %d ms, key pttl %d ms)", key, m, int64(z.Score)-now.UnixMilli(), pttl))
		}
	}
	return out, nil
}
