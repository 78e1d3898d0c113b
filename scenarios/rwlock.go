package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// The rwlock family: processes take read (shared) and write (exclusive)
// leases of a few read-write keys, hold them a while, renew and verify some,
// and release them. The rw-exclusion checker holds the validity windows to
// "many readers or one writer" per key; the leak scan requires every key to
// be gone once every lease's ttl has elapsed. The workload drives the
// implementation under test through RWImpl (Env.RW), so a mutant can be run
// with --impl.

// rwKeyPrefix begins every read-write key of the family (rwlock:0 …): the
// leak scan looks for keys containing it.
const rwKeyPrefix = "rwlock"

// rwKeys is how many read-write keys the processes share; key 0 gets three
// quarters of the acquisitions, so it is the contended one.
const rwKeys = 3

// rwStyle is how the processes of a scenario use their leases.
type rwStyle struct {
	// writeShare is the share of write acquisitions.
	writeShare float64
	// stall is the share of holders that stop (a GC pause) for
	// stallFor(ttl) before they renew and release, instead of holding for
	// their short drawn time.
	stall    float64
	stallFor func(ttl time.Duration) time.Duration
}

// rwWorkload is one client process of the rwlock family: acquire a read or
// a write lease once (no waiting: prim's read-write leases are immediate
// only), hold it for up to a twentieth of the ttl (or stall), renew and
// verify it three times in ten, release it and pause up to 10ms (so that
// overlapping readers do not starve the writers for good). A contended
// process tries again after 0.2-2ms, one whose outcome was unknown after
// 5-25ms.
func rwWorkload(st rwStyle) func(ctx context.Context, env *Env, proc int) {
	return func(ctx context.Context, env *Env, proc int) {
		r := env.Rand(proc)
		c := env.Clients[proc]
		rec := env.Rec
		ttl := env.TTL
		for ctx.Err() == nil {
			// Every decision of this attempt is drawn first, whatever its
			// outcome: the k-th attempt of a process is the same for a seed.
			k := 0
			if r.IntN(4) == 0 {
				k = 1 + r.IntN(rwKeys-1)
			}
			write := r.Float64() < st.writeShare
			hold := time.Duration(r.Int64N(int64(ttl/20) + 1))
			stalls := r.Float64() < st.stall
			renews := r.Float64() < 0.3
			backoff := time.Duration(200+r.IntN(1800)) * time.Microsecond
			uncertainBackoff := time.Duration(5+r.IntN(20)) * time.Millisecond
			pause := time.Duration(r.IntN(10000)) * time.Microsecond
			key := fmt.Sprintf("%s:%d", rwKeyPrefix, k)
			f := history.FAcquireRead
			if write {
				f = history.FAcquireWrite
			}
			if _, err := rec.Invoke(proc, history.Op{F: f, Key: key, TTLMs: ttl.Milliseconds()}); err != nil {
				return
			}
			// Whatever the outcome, the history gets the owner the attempt sent.
			actx, att := withAttempt(ctx, env.Key(key))
			held, err := env.RW.TryAcquire(actx, c, env.Key(key), write, ttl)
			switch {
			case err == nil:
				rec.OK(proc, history.Op{Owner: held.Owner(), TTLMs: ttl.Milliseconds()})
			case errors.Is(err, ErrContended):
				rec.Fail(proc, history.Op{Owner: att.Owner()})
				sleep(ctx, backoff)
				continue
			default:
				env.failedWith(proc, err, history.Op{Owner: att.Owner()})
				sleep(ctx, uncertainBackoff)
				continue
			}
			if stalls {
				// The holder stops; whatever its lease's ttl, the checker
				// counts it valid only until invocation + ttl.
				sleep(ctx, st.stallFor(ttl))
			} else {
				sleep(ctx, hold)
			}
			op := history.Op{Key: key, Owner: held.Owner()}
			if renews && ctx.Err() == nil {
				env.renewVerify(ctx, proc, held, op)
			}
			env.release(ctx, proc, op, held.Release)
			sleep(ctx, pause)
		}
	}
}

// rwProps is the family's properties: rw-exclusion, which a hazard scenario
// may see broken by an overlap once its fault had its effect, and
// lease-protocol, which holds each owner's renew, verify and release answers
// to its own lease (no "held" after it certainly ended, no "not held" while
// it certainly lasted; a lost owner may be denied in a hazard scenario).
// (progress and leaks are added by Register.)
func rwProps(hazard bool) []Property {
	p := Property{Checker: "rw-exclusion"}
	lp := Property{Checker: "lease-protocol"}
	if hazard {
		p.Expect, p.Hazards = MayHazard, []string{models.KindOverlap}
		lp.Expect = MayHazard
	}
	return []Property{p, lp}
}

// rwScenario registers rwlock/<fault> and returns it (for its Needs).
func rwScenario(fault, summary string, topo Topology, st rwStyle, nemesis func(*rand.Rand, time.Duration, time.Duration) []Event, hazard bool, noLeakScan string) *Scenario {
	s := &Scenario{
		Name: "rwlock/" + fault, Summary: summary,
		Topo: topo, Workload: rwWorkload(st), Nemesis: nemesis,
		Properties: rwProps(hazard), Check: models.Options{Drift: 20 * time.Millisecond},
		Impls: []string{"prim"}, RW: true, NoLeakScan: noLeakScan,
	}
	Register(s)
	return s
}

func init() {
	standalone := Topology{Kind: testbed.KindStandalone}
	mixed := rwStyle{writeShare: 0.4}
	// Holders stop for 1.5 leases three times in ten.
	paused := rwStyle{writeShare: 0.4, stall: 0.3, stallFor: func(ttl time.Duration) time.Duration { return ttl + ttl/2 }}
	// In the hazard scenarios seven acquisitions in ten are writes, so the
	// first to reach a key the fault emptied is most often a writer, and
	// nine holders in ten keep their lease for four fifths of it, so some
	// are mid-lease when the fault strikes and still are when the clients
	// reach the server again: a lost (or expired) owner's lease, still live
	// for its holder, must then keep that writer out.
	longHold := rwStyle{writeShare: 0.7, stall: 0.9, stallFor: func(ttl time.Duration) time.Duration { return ttl * 4 / 5 }}

	rwScenario("baseline", "no faults; 8 processes take read and write leases of three keys (one contended), hold them "+
		"briefly, renew and verify some, release them. Readers share, a writer is alone: everything must hold.",
		standalone, mixed, nil, false, "")
	rwScenario("partition-client", "one client at a time is cut off (silently) from the server and healed: its "+
		"acquisitions, renewals and releases become uncertain (an uncertain renewal ends its holder's lease). "+
		"Everything must hold.",
		standalone, mixed, func(r *rand.Rand, d, _ time.Duration) []Event {
			return partitionClients(r, d, 1500*time.Millisecond, 700*time.Millisecond)
		}, false, "")
	rwScenario("pause-client", "holders stop for 1.5× the lease three times in ten (a GC pause) before renewing and "+
		"releasing: their lease runs out and incompatible owners take the key. A stopped holder stops counting on its "+
		"lease at invocation + ttl (the checker's validity window), and its late renewal must fail: everything must hold.",
		standalone, paused, nil, false, "").Needs = stallNeeds
	rwScenario("pause-primary", "the server is stopped (SIGSTOP) for longer than a lease (800ms, or a ttl and a tenth "+
		"plus 100ms at a long --ttl) and continued: requests time out (uncertain) and run at once on resume, with "+
		"deadlines on the server's clock. Everything must hold.",
		standalone, mixed, pausePrimary, false, "").Needs = pauseLongerThanLeaseNeeds
	rwScenario("failover-forced", "replication to the replica is cut, and 1s later the sentinels fail over to it: "+
		"the new primary lacks the owners added in the last second, so a writer can be admitted while a reader (or "+
		"a reader while a writer) the old primary admitted still holds its lease. Asynchronous replication gives no "+
		"consensus: may show HAZARD (an overlap after a failover proven to have lost writes), or PASS when no lost "+
		"owner was still live when the clients reached the new primary.",
		Topology{Kind: testbed.KindReplicated, Replicas: 1, Sentinels: 3}, longHold, rateFailoverForced(time.Second), true, "")
	rwScenario("clock-skew", "the server restarts (with AOF: the owners survive) with its wall clock 4 leases ahead, "+
		"later back on true time: every live owner's deadline passes at once while its holder still counts on it, "+
		"and the next acquisition prunes it. May show HAZARD (an overlap once the server's clock is proven ahead), "+
		"or PASS when the restart outlasted every live lease.",
		Topology{Kind: testbed.KindStandalone, AOF: true}, longHold, leaseClockJumps, true,
		"the server's clock was moved: an owner added while it ran ahead outlives its ttl in real time")
	rwScenario("baseline-cluster", "rwlock/baseline on a 3-primary cluster (cluster clients; each key's sorted set on "+
		"its slot's owner). Everything must hold.", clusterTopo, mixed, nil, false, "")
}
