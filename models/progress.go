package models

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// The key of a nemesis operation (f "nemesis") says what it does to the
// system under test; its value names the event.
const (
	// NemesisFault starts a degraded state (a partition, a pause, a kill)
	// that lasts until the next NemesisHeal.
	NemesisFault = "fault"
	// NemesisHeal ends every degraded state (heal, resume, restart).
	NemesisHeal = "heal"
	// NemesisEvent is a one-shot change (a failover, a restart with another
	// clock): degraded while it runs, over when it completes.
	NemesisEvent = "event"
)

// hasProgressOps reports whether h has enough answerable operations for the
// progress checker to judge.
func hasProgressOps(h *history.History) bool {
	n := 0
	for k := range h.Ops {
		if slices.Contains(progressKinds, h.Ops[k].F) {
			if n++; n >= 20 {
				return true
			}
		}
	}
	return false
}

// progressKinds are the operations whose answers show progress.
// A rate limiter's refusal (fail without an error) is an answer.
var progressKinds = []string{history.FAcquire, history.FAcquireWait, history.FRenew, history.FVerify, history.FRelease,
	history.FAllow, history.FAllowWait, history.FSemAcquire, history.FSemAcquireWait, history.FAcquireRead, history.FAcquireWrite,
	history.FLatchCreate, history.FLatchReset, history.FLatchJoin, history.FLatchCountDown, history.FLatchWait}

// answered reports whether op got an answer of the protocol: ok, or a fail
// without an error (contended, not the owner). info and a fail with an error
// (a server refusal such as MOVED or OOM, a deadline) are not progress.
func answered(op *history.Operation) bool {
	return op.Type == history.OK || op.Type == history.Fail && op.Err == ""
}

// CheckProgress checks that the system under test keeps answering: in every
// healthy period — before the first fault, and from RecoverBound after each
// heal (or after a one-shot event completed) until the next fault — the
// share of answered operations (ok, or a definite "no" without an error) of
// each kind (acquire, acquire_wait, renew, verify, release, allow,
// allow_wait, sem_acquire, sem_acquire_wait, acquire_read, acquire_write,
// latch_create, latch_reset, latch_join, latch_count_down, latch_wait) that
// completed
// in it is at least MinProgress, counting kinds with at least 20 completions
// there. Nemesis operations (f "nemesis", key fault/heal/event) mark the
// periods; a history without them is one healthy period. A history with no
// period holding enough operations is UNKNOWN: nothing could be judged.
func CheckProgress(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	const minOps = 20
	recover := int64(o.RecoverBound)

	// Healthy periods [from, to).
	type period struct{ from, to int64 }
	var periods []period
	healthyFrom := int64(0) // -1 while degraded
	var nem []*history.Operation
	for k := range h.Ops {
		if op := &h.Ops[k]; op.F == history.FNemesis {
			nem = append(nem, op)
		}
	}
	for _, ev := range nem {
		switch ev.Key {
		case NemesisEffect, NemesisEffectOngoing, NemesisEffectEnd: // an observation, not a change
		case NemesisHeal:
			if healthyFrom < 0 {
				healthyFrom = addSat(ev.Return, recover)
			}
		default: // a fault, or an event: degraded from its invocation
			if healthyFrom >= 0 && ev.T > healthyFrom {
				periods = append(periods, period{healthyFrom, ev.T})
			}
			healthyFrom = -1
			if ev.Key != NemesisFault {
				healthyFrom = addSat(ev.Return, recover)
			}
		}
	}
	if healthyFrom >= 0 && healthyFrom < h.End {
		periods = append(periods, period{healthyFrom, h.End + 1})
	}

	// One pass over the operations: each completion counts in the period
	// it falls in (periods are disjoint and in order).
	type tally struct {
		n     [][2]int // per progressKinds index: answered, completed
		first []*history.Operation
	}
	tallies := make([]tally, len(periods))
	for k := range h.Ops {
		op := &h.Ops[k]
		fi := slices.Index(progressKinds, op.F)
		if !op.Done || fi < 0 {
			continue
		}
		pi := sort.Search(len(periods), func(i int) bool { return periods[i].to > op.Return })
		if pi == len(periods) || op.Return < periods[pi].from {
			continue
		}
		t := &tallies[pi]
		if t.n == nil {
			t.n, t.first = make([][2]int, len(progressKinds)), make([]*history.Operation, len(progressKinds))
		}
		t.n[fi][1]++
		if answered(op) {
			t.n[fi][0]++
		} else if t.first[fi] == nil {
			t.first[fi] = op
		}
	}
	judged, total := 0, 0
	var worst []string
	for pi, p := range periods {
		t := tallies[pi]
		for fi, f := range progressKinds {
			if t.n == nil || t.n[fi][1] < minOps {
				continue
			}
			n := t.n[fi]
			judged++
			total += n[1]
			share := float64(n[0]) / float64(n[1])
			if share >= o.MinProgress {
				continue
			}
			if !slices.Contains(worst, f) {
				worst = append(worst, f)
			}
			c.fail(KindNoProgress, f, fmt.Sprintf("%d of %d %s operations answered (%.0f%%, want %.0f%%) in the healthy period [%s, %s); first unanswered: %s",
				n[0], n[1], f, 100*share, 100*o.MinProgress, fmtT(p.from), fmtT(p.to), t.first[fi].Err), t.first[fi])
		}
	}
	if judged == 0 {
		c.undecided("", fmt.Sprintf("no healthy period (%d in all, %v after each heal) holds %s of one kind: progress cannot be judged", len(periods), o.RecoverBound, Plural(minOps, "completion")))
	}
	r := c.result("progress", total, fmt.Sprintf("%s in %s: every kind answered at least %.0f%% of the time",
		Plural(total, "operation"), Plural(len(periods), "healthy period"), 100*o.MinProgress))
	if len(worst) > 0 {
		r.Summary = fmt.Sprintf("no progress for %s: %s", strings.Join(worst, ", "), r.Summary)
	}
	r.Elapsed = time.Since(start)
	return r
}
