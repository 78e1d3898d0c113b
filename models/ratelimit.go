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

func isAllow(f string) bool { return f == history.FAllow || f == history.FAllowWait }

// limiterConfig is a rate limiter's configuration, from its operations.
type limiterConfig struct {
	algo                                         string
	limit, window, segments, burst, rate, period int64 // window and period in ns
	from                                         *history.Operation
}

func configOf(op *history.Operation) limiterConfig {
	return limiterConfig{algo: op.Algo, limit: op.Limit, window: ms(op.WindowMs), segments: op.Segments,
		burst: op.Burst, rate: op.Rate, period: ms(op.PeriodMs), from: op}
}

// conflicts reports a field set in both configurations with different values.
func (a limiterConfig) conflicts(b limiterConfig) bool {
	diff := func(x, y int64) bool { return x != 0 && y != 0 && x != y }
	return (a.algo != "" && b.algo != "" && a.algo != b.algo) || diff(a.limit, b.limit) || diff(a.window, b.window) ||
		diff(a.segments, b.segments) || diff(a.burst, b.burst) || diff(a.rate, b.rate) || diff(a.period, b.period)
}

func (a *limiterConfig) fill(b limiterConfig) {
	if a.algo == "" {
		a.algo = b.algo
	}
	for _, p := range [][2]*int64{{&a.limit, &b.limit}, {&a.window, &b.window}, {&a.segments, &b.segments},
		{&a.burst, &b.burst}, {&a.rate, &b.rate}, {&a.period, &b.period}} {
		if *p[0] == 0 {
			*p[0] = *p[1]
		}
	}
	if a.from == nil {
		a.from = b.from
	}
}

// grant is one ok allow: n permits granted at some instant in [t, ret].
type grant struct {
	t, ret int64
	w      int64
	op     int
}

// CheckRateLimit checks the grants (ok allow and allow_wait operations; n
// permits each, default 1) of every rate limiter against its algorithm's
// bound, reading the configuration from the operations (algo, limit,
// window_ms, segments, burst, rate, period_ms), over spans of every length
// (w is the window less Drift, the shortest a window lasts in real time):
//
//   - fixed: at most limit per server window, and windows do not overlap,
//     so at most (⌈L/w⌉ + 1)·limit within any span of length L: checked
//     exactly for spans up to four windows (2·limit in any span shorter
//     than w, 3·limit shorter than 2w, …), and as (L/w + 2)·limit over
//     spans of every length, so that a limiter admitting twice its rate in
//     every window fails;
//   - sliding: at most limit within any span shorter than w, so at most
//     ⌈(L+1)/w⌉·limit within any span of length L (exactly up to four
//     windows, ((L+1)/w + 1)·limit beyond). The algorithm rounds each
//     permit's timestamp forward, to its segment's end, so a permit counts
//     for at least a whole window after it was granted: limit+1 grants
//     within less than a window cannot happen. (A bound of
//     window − window/segments would let an implementation that rounds
//     backward, to the segment's start, pass: its permits expire up to one
//     segment early, within spans between window − segment and window.);
//   - bucket (continuous refill): at most burst + rate·(span + Drift)/period
//     within any span.
//
// A grant happened at an unknown instant between its invocation and its
// completion, so a set of grants is counted against a span [a, b] only when
// all of them were invoked at or after a and completed by b: a violation is
// certain whatever the instants were. Denied (fail) and unknown (info)
// requests are not counted. O(n log n): a sweep over invocation times with a
// Fenwick tree (the windows' exact bounds) or a segment tree with range add
// and range max (the linear bounds: the best end of the span for each
// start). A limiter that broke its bound is reported twice when the two
// differ: its worst span, and the span that was complete first (a binary
// search over completion times, O(n log² n)), whose completion is the
// violation's time, so that a violation complete before a fault is never
// blamed on it.
//
// Every limiter over its bound also gets one Reach per run of violating span
// starts (Result.Reaches), with the key's first grant and a horizon (two
// windows, or two refills from empty, plus Drift), so that Judge counts an
// over-admission as a fault's hazard only on a key that had state when the
// fault struck and in spans starting soon enough after it. The reaches are
// Fresh: a span that starts after a loss that ended (an effect that is not
// ongoing: a restart that lost the dataset, a clock moved) holds only grants
// that read state written after the loss, which the algorithm alone decided,
// so it is FAIL whatever the horizon; an ongoing loss (a failover until its
// deposed primary is seen demoted) keeps the horizon.
//
// Denials are held to the algorithm's state too (availability):
// KindWronglyLimited, see availability.
//
// A history in which no request was granted has nothing to check: UNKNOWN,
// never PASS (unless a denial was wrong).
func CheckRateLimit(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	cfgs := make(map[string]*limiterConfig)
	grants := make(map[string][]grant)
	infos := make(map[string][]grant)
	denials := make(map[string][]int)
	var keys []string
	n := 0
	begin := history.Never // the history's first invocation
	for k := range h.Ops {
		op := &h.Ops[k]
		begin = min(begin, op.T)
		if !isAllow(op.F) {
			continue
		}
		n++
		cfg := cfgs[op.Key]
		if cfg == nil {
			cfg = &limiterConfig{}
			cfgs[op.Key] = cfg
			keys = append(keys, op.Key)
		}
		oc := configOf(op)
		if cfg.conflicts(oc) {
			c.undecided(op.Key, "operations disagree on the limiter configuration", cfg.from, op)
		}
		cfg.fill(oc)
		switch {
		case op.Type == history.OK:
			grants[op.Key] = append(grants[op.Key], grant{op.T, op.Return, op.Weight(), k})
		case op.Type == history.Info:
			// It may have consumed, at any instant after its invocation.
			infos[op.Key] = append(infos[op.Key], grant{op.T, history.Never, op.Weight(), k})
		case op.Type == history.Fail && op.F == history.FAllow && op.Err == "":
			denials[op.Key] = append(denials[op.Key], k)
		}
	}
	slices.Sort(keys)
	granted := 0
	for _, key := range keys {
		granted += len(grants[key])
		checkLimiter(h, key, *cfgs[key], limiterOps{grants[key], infos[key], denials[key], begin}, int64(o.Drift), c)
	}
	if granted == 0 {
		c.undecided("", fmt.Sprintf("nothing to check: none of %s was granted", Plural(n, "request")))
	}
	r := c.result("rate-limit", n, fmt.Sprintf("%s to %s: grants within every algorithm's bound, and no request denied that the algorithm's state had to allow", Plural(n, "request"), Plural(len(keys), "limiter")))
	r.Elapsed = time.Since(start)
	return r
}

// limiterOps are one limiter's operations: its grants, its requests of
// unknown outcome (which may have consumed at any instant after their
// invocation: ret Never), its denials (fail allow operations without an
// error: a request that failed with an error was not decided), and when
// the history began.
type limiterOps struct {
	grants, infos []grant
	denials       []int
	begin         int64
}

func checkLimiter(h *history.History, key string, cfg limiterConfig, ops limiterOps, drift int64, c *collector) {
	gs := ops.grants
	switch cfg.algo {
	case history.AlgoFixed, history.AlgoSliding:
		if cfg.limit <= 0 || cfg.window <= 0 {
			c.undecided(key, "limit or window_ms missing", cfg.from)
			return
		}
		if cfg.algo == history.AlgoSliding && cfg.segments <= 0 {
			c.undecided(key, "segments missing for a sliding window", cfg.from)
			return
		}
		// w is the shortest a window can last in real time (the drift
		// allowance taken off).
		w := cfg.window - drift
		if w <= 0 {
			c.undecided(key, "the drift allowance is longer than the span the bound applies to", cfg.from)
			return
		}
		name := fmt.Sprintf("fixed window (limit %d per %v)", cfg.limit, time.Duration(cfg.window))
		if cfg.algo == history.AlgoSliding {
			name = fmt.Sprintf("sliding window (limit %d per %v in %d segments)", cfg.limit, time.Duration(cfg.window), cfg.segments)
		}
		checks, base := windowChecks(cfg.algo, cfg.limit, w)
		perNs := float64(cfg.limit) / float64(w)
		// A lost or early-freed window's state lets a violating span start
		// up to a window after the effect was observed; twice that, since a
		// loss can go on after it is first observed (grants a deposed
		// primary takes until it is demoted are discarded then).
		report(h, key, gs, c, addSat(2*cfg.window, drift), func(gs []grant) *overLimit {
			exact := windowBound(gs, checks, name)
			long := linearBound(gs, base, perNs, func(granted, a, b int64, bound float64) string {
				return fmt.Sprintf("%s: %s granted within [%s, %s] (span %v), bound %.1f (%d per window of at least %v, and %s)",
					name, Plural(granted, "permit"), fmtT(a), fmtT(b), time.Duration(b-a), bound, cfg.limit, time.Duration(w), windowSlack(cfg.algo, cfg.limit))
			})
			return exact.merge(long)
		})
		availability(h, key, cfg, ops, drift, c)
	case history.AlgoBucket:
		if cfg.burst <= 0 || cfg.rate < 0 || cfg.period <= 0 {
			c.undecided(key, "burst, rate or period_ms missing for a token bucket", cfg.from)
			return
		}
		// Once the state is valid again (tokens ≤ burst) no span starting
		// later can break the bound; a refill from empty (burst·period/rate)
		// after the effect was observed, twice over, as for the windows.
		horizon := history.Never
		if cfg.rate > 0 {
			horizon = addSat(2*int64(math.Ceil(float64(cfg.burst)*float64(cfg.period)/float64(cfg.rate))), drift)
		}
		perNs := float64(cfg.rate) / float64(cfg.period)
		report(h, key, gs, c, horizon, func(gs []grant) *overLimit {
			return linearBound(gs, float64(cfg.burst)+perNs*float64(drift), perNs, func(granted, a, b int64, bound float64) string {
				return fmt.Sprintf("token bucket (burst %d, %d per %v): %s granted within [%s, %s] (span %v), bound %.1f",
					cfg.burst, cfg.rate, time.Duration(cfg.period), Plural(granted, "permit"), fmtT(a), fmtT(b), time.Duration(b-a), bound)
			})
		})
		availability(h, key, cfg, ops, drift, c)
	case "":
		c.undecided(key, "no algo recorded for the limiter")
	default:
		c.undecided(key, fmt.Sprintf("unknown limiter algorithm %q", cfg.algo), cfg.from)
	}
}

// exactWindows is how many window lengths the windows' exact bounds are
// checked over (spanBound); longer spans are held to the linear bound.
const exactWindows = 4

// spanBound is a bound on closed spans: any [a, a+span] holds at most bound
// permits.
type spanBound struct{ span, bound int64 }

// windowChecks returns the exact bounds of a fixed or sliding window over
// spans up to exactWindows windows long, w being the shortest a window lasts
// in real time, and the intercept of the linear bound that holds over spans
// of every length L (base + limit·L/w):
//
//   - fixed: a window admits at most limit, and windows do not overlap, so a
//     span of length L meets at most ⌈L/w⌉ + 1 of them: at most
//     (⌈L/w⌉ + 1)·limit grants, i.e. (j+1)·limit in any span shorter than
//     j·w, and at most (L/w + 2)·limit in any;
//   - sliding: at most limit in any span shorter than w, so a span of length
//     L (L+1 instants of a nanosecond) splits into ⌈(L+1)/w⌉ such spans: at
//     most j·limit in any span shorter than j·w, and at most
//     ((L+1)/w + 1)·limit in any.
func windowChecks(algo string, limit, w int64) ([]spanBound, float64) {
	var checks []spanBound
	for j := int64(1); j <= exactWindows; j++ {
		b := j * limit
		if algo == history.AlgoFixed {
			b += limit
		}
		checks = append(checks, spanBound{j*w - 1, b})
	}
	if algo == history.AlgoFixed {
		return checks, float64(2 * limit)
	}
	return checks, float64(limit) * (1 + 1/float64(w))
}

func windowSlack(algo string, limit int64) string {
	if algo == history.AlgoFixed {
		return fmt.Sprintf("%d for the two windows a span straddles", 2*limit)
	}
	return fmt.Sprintf("%d for the window a span begins in", limit)
}

// fenwick is a Fenwick tree of int64 sums.
type fenwick []int64

func (f fenwick) add(i int, v int64) {
	for i++; i < len(f); i += i & -i {
		f[i] += v
	}
}

// sum of [0, i).
func (f fenwick) sum(i int) int64 {
	var s int64
	for ; i > 0; i -= i & -i {
		s += f[i]
	}
	return s
}

// overLimit is a bound's violation: the worst span [a, b] and what it says.
type overLimit struct {
	a, b   int64
	excess float64 // permits over the bound in the worst span
	msg    string
	runs   []startRun // the violating span starts, as runs (ascending within each bound)
}

// startRun is a run of violating span starts [first, last] of one bound,
// whose spans are at most len long (history.Never: unbounded).
type startRun struct{ first, last, len int64 }

// merge returns the violation of o or p with the most permits over its
// bound (o on a tie), with the runs of both; either may be nil.
func (o *overLimit) merge(p *overLimit) *overLimit {
	switch {
	case o == nil:
		return p
	case p == nil:
		return o
	}
	w := *o
	if p.excess > o.excess {
		w = *p
	}
	w.runs = append(slices.Clone(o.runs), p.runs...)
	return &w
}

// startRuns groups span starts into runs of violating ones: starts holds
// every distinct start in descending order, bad whether each violates, len
// the longest its spans are.
func startRuns(starts []int64, bad []bool, length int64) []startRun {
	var runs []startRun
	open := false
	for k := len(starts) - 1; k >= 0; k-- {
		switch {
		case bad[k] && open:
			runs[len(runs)-1].last = starts[k]
		case bad[k]:
			runs = append(runs, startRun{starts[k], starts[k], length})
			open = true
		default:
			open = false
		}
	}
	return runs
}

// report checks a limiter's grants with bound (nil: within the bound) and
// records its worst span and, when another span was complete earlier, that
// one: the earliest completion t at which the grants completed by t already
// break the bound (binary search: a violation stays one when grants are
// added).
func report(h *history.History, key string, gs []grant, c *collector, horizon int64, bound func([]grant) *overLimit) {
	worst := bound(gs)
	if worst == nil {
		return
	}
	since := history.Never
	for _, g := range gs {
		since = min(since, g.t)
	}
	for _, run := range worst.runs {
		c.reaches = append(c.reaches, Reach{Kind: KindOverLimit, Key: key, Since: since, First: run.first, Last: run.last,
			Len: run.len, Horizon: horizon, Fresh: true})
	}
	rets := make([]int64, 0, len(gs))
	for _, g := range gs {
		rets = append(rets, g.ret)
	}
	slices.Sort(rets)
	rets = slices.Compact(rets)
	upTo := func(t int64) []grant {
		var out []grant
		for _, g := range gs {
			if g.ret <= t {
				out = append(out, g)
			}
		}
		return out
	}
	// The smallest completion time whose prefix already violates.
	i := sort.Search(len(rets), func(i int) bool { return bound(upTo(rets[i])) != nil })
	if i < len(rets) && rets[i] < worst.b {
		if first := bound(upTo(rets[i])); first != nil {
			reportWindow(h, key, gs, first.a, first.b, "first over the bound: "+first.msg, c)
		}
	}
	reportWindow(h, key, gs, worst.a, worst.b, worst.msg, c)
}

// windowBound finds spans [a, a+span] (all grants invoked ≥ a and completed
// ≤ a+span) holding more than their bound, for each of checks, and returns
// the worst (the most permits over its bound; its end the last completion
// in it), or nil. O(len(checks) · n log n).
func windowBound(gs []grant, checks []spanBound, name string) *overLimit {
	if len(gs) == 0 {
		return nil
	}
	rets := make([]int64, len(gs))
	for k := range gs {
		rets[k] = gs[k].ret
	}
	slices.Sort(rets)
	byT := slices.Clone(gs)
	slices.SortFunc(byT, func(a, b grant) int { return cmp.Compare(b.t, a.t) }) // descending
	fw := make(fenwick, len(gs)+1)
	var count, worstGot int64
	worst, worstA, worstCheck := int64(0), int64(0), -1
	var starts []int64
	bad := make([][]bool, len(checks))
	// hi[i]: the grants completed by the end of check i's span from the
	// current start; starts descend, so the ends do too.
	hi := make([]int, len(checks))
	for i := range hi {
		hi[i] = len(rets)
	}
	for k := 0; k < len(byT); {
		a := byT[k].t
		for ; k < len(byT) && byT[k].t == a; k++ {
			fw.add(sort.Search(len(rets), func(n int) bool { return rets[n] >= byT[k].ret }), byT[k].w)
		}
		starts = append(starts, a)
		any := false
		for i, ck := range checks {
			end := addSat(a, ck.span)
			for hi[i] > 0 && rets[hi[i]-1] > end {
				hi[i]--
			}
			got := fw.sum(hi[i])
			bad[i] = append(bad[i], got > ck.bound)
			if got > ck.bound {
				any = true
				if got-ck.bound > worst {
					worst, worstA, worstCheck, worstGot = got-ck.bound, a, i, got
				}
			}
		}
		if any {
			count++
		}
	}
	if count == 0 {
		return nil
	}
	ck := checks[worstCheck]
	end := addSat(worstA, ck.span)
	last := worstA
	for _, g := range gs {
		if g.t >= worstA && g.ret <= end && g.ret > last {
			last = g.ret
		}
	}
	var runs []startRun
	for i, ck := range checks {
		runs = append(runs, startRuns(starts, bad[i], ck.span)...)
	}
	return &overLimit{worstA, last, float64(worst), fmt.Sprintf("%s: %s granted within [%s, %s] (span %v), bound %d in any span up to %v (%s over a bound)",
		name, Plural(worstGot, "permit"), fmtT(worstA), fmtT(last), time.Duration(last-worstA), ck.bound, time.Duration(ck.span), Plural(count, "span start")),
		runs}
}

// reportWindow records one violation with (up to 20 of) the grants
// contained in [a, b]: the first 10 and the last 10 to complete, so that the
// violation's time (its last completion) is among them.
func reportWindow(h *history.History, key string, gs []grant, a, b int64, msg string, c *collector) {
	var in []grant
	for _, g := range gs {
		if g.t >= a && g.ret <= b {
			in = append(in, g)
		}
	}
	slices.SortStableFunc(in, func(x, y grant) int { return cmp.Compare(x.ret, y.ret) })
	if len(in) > 20 {
		in = append(in[:10], in[len(in)-10:]...)
	}
	ops := make([]*history.Operation, 0, len(in))
	for _, g := range in {
		ops = append(ops, &h.Ops[g.op])
	}
	c.fail(KindOverLimit, key, msg, ops...)
}

// maxTree is a segment tree over float64 leaves with range add and range max
// (iterative, lazy additions kept on internal nodes).
type maxTree struct {
	n, h int
	t, d []float64
}

func newMaxTree(leaves []float64) *maxTree {
	n, h := 1, 0
	for n < len(leaves) {
		n, h = n*2, h+1
	}
	m := &maxTree{n: n, h: h, t: make([]float64, 2*n), d: make([]float64, n)}
	for i := range n {
		m.t[n+i] = math.Inf(-1)
		if i < len(leaves) {
			m.t[n+i] = leaves[i]
		}
	}
	for i := n - 1; i > 0; i-- {
		m.t[i] = max(m.t[2*i], m.t[2*i+1])
	}
	return m
}

func (m *maxTree) apply(p int, v float64) {
	m.t[p] += v
	if p < m.n {
		m.d[p] += v
	}
}

func (m *maxTree) build(p int) {
	for p > 1 {
		p >>= 1
		m.t[p] = max(m.t[2*p], m.t[2*p+1]) + m.d[p]
	}
}

func (m *maxTree) push(p int) {
	for s := m.h; s > 0; s-- {
		if i := p >> s; m.d[i] != 0 {
			m.apply(2*i, m.d[i])
			m.apply(2*i+1, m.d[i])
			m.d[i] = 0
		}
	}
}

// add v to leaves [l, r).
func (m *maxTree) add(l, r int, v float64) {
	if l >= r {
		return
	}
	l, r = l+m.n, r+m.n
	l0, r0 := l, r
	for ; l < r; l, r = l>>1, r>>1 {
		if l&1 == 1 {
			m.apply(l, v)
			l++
		}
		if r&1 == 1 {
			r--
			m.apply(r, v)
		}
	}
	m.build(l0)
	m.build(r0 - 1)
}

// max over leaves [l, r).
func (m *maxTree) max(l, r int) float64 {
	res := math.Inf(-1)
	if l >= r {
		return res
	}
	l, r = l+m.n, r+m.n
	m.push(l)
	m.push(r - 1)
	for ; l < r; l, r = l>>1, r>>1 {
		if l&1 == 1 {
			res = max(res, m.t[l])
			l++
		}
		if r&1 == 1 {
			r--
			res = max(res, m.t[r])
		}
	}
	return res
}

// linearBound finds spans [a, b] whose contained grants exceed
// base + perNs·(b − a) (the token bucket's burst + rate·(span + drift)/period;
// the windows' bound over spans of every length), and returns the worst
// (the most permits over the bound), described by describe, or nil. For
// each start a (descending) it keeps, for every candidate end b (a
// completion time), C(b) − perNs·b where C(b) is the weight of the grants
// invoked ≥ a and completed ≤ b: O(n log n).
func linearBound(gs []grant, base, perNs float64, describe func(granted, a, b int64, bound float64) string) *overLimit {
	if len(gs) == 0 {
		return nil
	}
	rets := make([]int64, len(gs))
	for k := range gs {
		rets[k] = gs[k].ret
	}
	slices.Sort(rets)
	leaves := make([]float64, len(rets))
	for k, b := range rets {
		leaves[k] = -perNs * float64(b)
	}
	tree := newMaxTree(leaves)
	byT := slices.Clone(gs)
	slices.SortFunc(byT, func(a, b grant) int { return cmp.Compare(b.t, a.t) })
	const eps = 1e-9
	var count int64
	worst, worstA := math.Inf(-1), int64(0)
	var starts []int64
	var bad []bool
	for k := 0; k < len(byT); {
		a := byT[k].t
		for ; k < len(byT) && byT[k].t == a; k++ {
			pos := sort.Search(len(rets), func(n int) bool { return rets[n] >= byT[k].ret })
			tree.add(pos, len(rets), float64(byT[k].w))
		}
		lo := sort.Search(len(rets), func(n int) bool { return rets[n] >= a })
		excess := tree.max(lo, len(rets)) + perNs*float64(a) - base
		starts, bad = append(starts, a), append(bad, excess > eps*max(1, base))
		if excess > eps*max(1, base) {
			count++
			if excess > worst {
				worst, worstA = excess, a
			}
		}
	}
	if count == 0 {
		return nil
	}
	// The best end for the worst start, directly.
	var in []grant
	for _, g := range gs {
		if g.t >= worstA {
			in = append(in, g)
		}
	}
	slices.SortFunc(in, func(a, b grant) int { return cmp.Compare(a.ret, b.ret) })
	var sum int64
	bestB, bestV := worstA, math.Inf(-1)
	for n, g := range in {
		sum += g.w
		if n+1 < len(in) && in[n+1].ret == g.ret {
			continue
		}
		if v := float64(sum) - perNs*float64(g.ret-worstA); v > bestV {
			bestV, bestB = v, g.ret
		}
	}
	var granted int64
	for _, g := range in {
		if g.ret <= bestB {
			granted += g.w
		}
	}
	return &overLimit{worstA, bestB, worst,
		fmt.Sprintf("%s (%s over the bound)", describe(granted, worstA, bestB, base+perNs*float64(bestB-worstA)), Plural(count, "span start")),
		startRuns(starts, bad, history.Never)}
}
