package models

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// Availability of rate limiters (rule: a limiter must not deny what its own
// state allows). A denial (an allow that failed without an error; a request
// that failed with one was not decided, and allow_wait gives up on its own
// deadline) of n permits, n within the limit or burst, is a violation of
// kind KindWronglyLimited when the algorithm's state must have allowed it
// at every instant of the request, counting every grant to anyone and every
// request of unknown outcome (which may have consumed, at any instant after
// its invocation) that may have fallen before that instant:
//
//   - fixed window: no grant may have fallen within two windows plus Drift
//     before the request (the window that request is in, and the one
//     before: a counter exists only after a request that was granted);
//   - sliding window: none within a window, one segment (a permit may be
//     stamped up to a segment late) and Drift plus a millisecond (the
//     server's TIME in ms);
//   - token bucket: tokens = min over u of burst + rate·(s − u − Drift)/period
//     − (the permits possibly consumed in (u, s]) is at least n at the
//     request's invocation, for every u from two refills from empty before
//     it (or from the history's beginning), where the bucket is also at
//     least the refill since then minus what was consumed (a bucket never
//     holds less than nothing).
//
// A denial's RetryAfter (the operation's count, in µs, when recorded) is
// held to the same state: it is wrongly-limited when it is later than the
// state must allow the same request, absent other grants (fixed: a window
// after the last grant that may have come before the denial; sliding: a
// window and a segment; bucket: the refill of the tokens missing from the
// lower bound above), with Drift and a millisecond (RetryAfter is rounded
// up to one).
//
// A window's denial is only judged when the state it reads lies within the
// history (its look-back begins at or after the history's first
// invocation): a history that begins with a limiter in use says nothing of
// what came before. A server clock that went back (a restart with the clock behind)
// makes every algorithm deny longer than its state says: that is the hazard
// such a fault may show (a backward clock jump's effect explains
// KindWronglyLimited), never any other fault's.
func availability(h *history.History, key string, cfg limiterConfig, ops limiterOps, drift int64, c *collector) {
	if len(ops.denials) == 0 {
		return
	}
	possible := slices.Concat(ops.grants, ops.infos)
	slices.SortFunc(possible, func(a, b grant) int { return cmp.Compare(a.ret, b.ret) })
	since := history.Never
	for _, g := range possible {
		since = min(since, g.t)
	}
	// sufMinT[i]: the earliest invocation among possible[i:].
	sufMinT := make([]int64, len(possible)+1)
	sufMinT[len(possible)] = history.Never
	for i := len(possible) - 1; i >= 0; i-- {
		sufMinT[i] = min(possible[i].t, sufMinT[i+1])
	}
	// For the bucket: weights by invocation and by completion.
	byT := slices.Clone(possible)
	slices.SortFunc(byT, func(a, b grant) int { return cmp.Compare(a.t, b.t) })
	preT := make([]int64, len(byT)+1)
	for i, g := range byT {
		preT[i+1] = preT[i] + g.w
	}
	preRet := make([]int64, len(possible)+1)
	for i, g := range possible {
		preRet[i+1] = preRet[i] + g.w
	}
	// firstRet is the index of the first possible grant completed at or
	// after t (strictly after when after).
	firstRet := func(t int64, after bool) int {
		return sort.Search(len(possible), func(i int) bool {
			if after {
				return possible[i].ret > t
			}
			return possible[i].ret >= t
		})
	}
	// latestBefore is the possible grant completed last at or before t, for
	// the evidence (nil: none).
	latestBefore := func(t int64) *history.Operation {
		if i := firstRet(t, true); i > 0 {
			return &h.Ops[possible[i-1].op]
		}
		return nil
	}
	// lastPossible is the latest instant at or before d's completion at
	// which a grant (or a request of unknown outcome) may have fallen.
	lastPossible := func(d *history.Operation) (int64, bool) {
		i := firstRet(d.Return, false)
		if sufMinT[i] <= d.Return {
			return d.Return, true
		}
		if i > 0 {
			return possible[i-1].ret, true
		}
		return 0, false
	}
	report := func(d *history.Operation, msg string) {
		ops := []*history.Operation{d}
		if g := latestBefore(d.T); g != nil {
			ops = append([]*history.Operation{g}, ops...)
		}
		c.fail(KindWronglyLimited, key, msg, ops...)
		s := min(since, d.T)
		// Any state made before a backward clock jump can keep a request
		// denied until the clock catches up: no horizon.
		c.reaches = append(c.reaches, Reach{Kind: KindWronglyLimited, Key: key, Since: s, First: d.T, Last: d.T,
			Len: d.Return - d.T, Horizon: history.Never})
	}
	switch cfg.algo {
	case history.AlgoFixed, history.AlgoSliding:
		look := addSat(2*cfg.window, drift)
		what := fmt.Sprintf("fixed window (limit %d per %v): no grant to anyone, nor a request of unknown outcome, within two windows (+ %v drift) before it: the counter was empty, and the limiter denied what its state had to allow (it did not refill)",
			cfg.limit, time.Duration(cfg.window), time.Duration(drift))
		if cfg.algo == history.AlgoSliding {
			look = addSat(cfg.window+cfg.window/cfg.segments+int64(time.Millisecond), drift)
			what = fmt.Sprintf("sliding window (limit %d per %v in %d segments): no grant to anyone, nor a request of unknown outcome, within %v (a window, a segment, + %v drift) before it: the window was empty, and the limiter denied what its state had to allow (it did not refill)",
				cfg.limit, time.Duration(cfg.window), cfg.segments, time.Duration(look-drift), time.Duration(drift))
		}
		// The state a denial read ends, at the latest, a window (a window
		// and a segment) after the last grant that may have come before it.
		life, life2 := cfg.window, "a window"
		if cfg.algo == history.AlgoSliding {
			life, life2 = cfg.window+cfg.window/cfg.segments, "a window and a segment"
		}
		for _, k := range ops.denials {
			d := &h.Ops[k]
			if d.Weight() > cfg.limit {
				continue
			}
			if d.T-look >= ops.begin && sufMinT[firstRet(d.T-look, false)] > d.Return {
				report(d, fmt.Sprintf("%s denied at [%s, %s]; %s", Plural(d.Weight(), "permit"), fmtT(d.T), fmtT(d.Return), what))
				continue
			}
			if d.Count <= 0 {
				continue
			}
			last, ok := lastPossible(d)
			if !ok {
				continue
			}
			ra := d.Count * int64(time.Microsecond)
			if most := last + life + drift + int64(time.Millisecond) - d.T; ra > most {
				report(d, fmt.Sprintf("%s denied at [%s, %s] with RetryAfter %v: the last grant that may have come before it was by %s, so the state it read is gone %s (+ %v drift, + 1ms) after that, by %v after the request: the RetryAfter is too late",
					Plural(d.Weight(), "permit"), fmtT(d.T), fmtT(d.Return), time.Duration(ra), fmtT(last), life2, time.Duration(drift), time.Duration(most)))
			}
		}
	case history.AlgoBucket:
		if cfg.rate <= 0 {
			return // a bucket that never refills may deny for ever
		}
		perNs := float64(cfg.rate) / float64(cfg.period)
		burst := float64(cfg.burst)
		full := int64(math.Ceil(burst / perNs)) // a refill from empty
		for _, k := range ops.denials {
			d := &h.Ops[k]
			n := float64(d.Weight())
			if d.Weight() > cfg.burst {
				continue
			}
			// Before the history began the bucket held at least nothing.
			u0 := max(d.T-drift-2*full, ops.begin)
			// Consumed concurrently with the request (invoked by its end,
			// completed after it, or of unknown outcome): counted for every u.
			inv := sort.Search(len(byT), func(i int) bool { return byT[i].t > d.Return })
			hi := firstRet(d.Return, true) // possible[:hi] completed by the request's end
			cum := float64(preT[inv] - preRet[hi])
			least := burst - cum // u at the request's end
			lo := firstRet(u0, true)
			// Down to the end for a RetryAfter to check: it needs the bound
			// itself.
			for i := hi - 1; i >= lo && (least >= n || d.Count > 0); i-- {
				cum += float64(possible[i].w)
				elapsed := max(0, d.T-possible[i].ret-drift)
				least = min(least, burst+perNs*float64(elapsed)-cum)
			}
			// At u0 the bucket held at least nothing, and has refilled
			// since (2·burst when the history is long enough).
			least = min(least, perNs*float64(max(0, d.T-u0-drift))-cum)
			if least < n+1e-6 {
				ra := d.Count * int64(time.Microsecond)
				most := int64(math.Ceil(max(0, n-least)/perNs)) + drift + int64(time.Millisecond)
				if d.Count > 0 && ra > most {
					report(d, fmt.Sprintf("%s denied at [%s, %s] with RetryAfter %v; token bucket (burst %d, %d per %v): counting every grant and request of unknown outcome that may have come before it, the bucket held at least %.2f tokens, so it holds %s again by %v (+ %v drift, + 1ms): the RetryAfter is too late",
						Plural(d.Weight(), "permit"), fmtT(d.T), fmtT(d.Return), time.Duration(ra), cfg.burst, cfg.rate, time.Duration(cfg.period), least, Plural(d.Weight(), "token"), time.Duration(most-drift-int64(time.Millisecond)), time.Duration(drift)))
				}
				continue
			}
			report(d, fmt.Sprintf("%s denied at [%s, %s]; token bucket (burst %d, %d per %v): counting every grant and request of unknown outcome that may have come before it, the bucket held at least %.2f tokens (+ %v drift), and the limiter denied what its state had to allow (it did not refill)",
				Plural(d.Weight(), "permit"), fmtT(d.T), fmtT(d.Return), cfg.burst, cfg.rate, time.Duration(cfg.period), least, time.Duration(drift)))
		}
	}
}
