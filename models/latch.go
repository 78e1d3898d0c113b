package models

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// KindLatchDecrementedTwice is a count-down whose answer needs more
// decrements than count-downs had been invoked, or none at all: one call
// applied twice (or not at all). Like KindLatchUnderflow it is never a
// hazard (NeverHazard): a lost write can only leave a count higher, never
// lower, and a generation's id is never reused.
const KindLatchDecrementedTwice = "latch-decremented-twice"

func isLatchOp(f string) bool {
	switch f {
	case history.FLatchCreate, history.FLatchReset, history.FLatchJoin, history.FLatchCountDown,
		history.FLatchWait, history.FLatchDelete:
		return true
	}
	return false
}

// latchGen is what the history says about one generation of one latch.
type latchGen struct {
	first   int64 // the earliest invocation of an operation of it (its state was made from then on)
	count   int64 // initial count
	known   bool  // created or reset (ok) in this history: count is known
	created *history.Operation
	// mayReplace: earliest instant at which the generation may have been
	// replaced or deleted; replaced: earliest instant by which it certainly
	// was. Never when not.
	mayReplace, replaced int64
	// count-downs of this generation: invocations of those that may have
	// decremented (ok with count ≥ 0, info), returns of the ok ones.
	mayInv  []int64
	infoInv []int64 // invocations of info count-downs (see mayInv)
	infoOps []*history.Operation
	// lateInv: invocations of info count-downs invoked after the
	// generation was certainly replaced (left out of mayInv), sorted;
	// lateOps the operations.
	lateInv  []int64
	lateOps  []*history.Operation
	okRet    []int64
	zeroInvs []int64 // invocations of ok count-downs that returned 0
	zeroRets []int64 // returns of ok count-downs that returned 0
}

// CheckLatch checks countdown latches, per key and generation (gen):
//
//   - no underflow: a count-down returns −1 or a remaining count ≥ 0
//     (KindLatchUnderflow, never a hazard: every decrement checks the
//     count);
//   - each call decrements once: reaching remaining r needs initial − r
//     count-downs that may have decremented invoked before it returned, and
//     r < initial (KindLatchDecrementedTwice, never a hazard: a lost write
//     can only leave a count higher, and a generation's id is never
//     reused); r cannot stay above initial − 1 − (count-downs completed
//     before it was invoked), and no two count-downs return the same r ≥ 1
//     (KindLatch: a lost decrement, which a lost write explains);
//   - an uncertain count-down (info) invoked after its generation was
//     certainly replaced found another generation, or none: it cannot have
//     decremented this one, and counts toward no answer of it — unless the
//     replacement was lost (a failover, a restart): a count-down answer
//     whose shortfall only those count-downs close is KindLatch, with the
//     replacement as the write whose loss explains it (Since: the earliest
//     instant it may have taken effect), never KindLatchDecrementedTwice;
//   - a replacement replaces only the generations before it (repIndex): a
//     reset or delete may end generation g only if it did not return before
//     g's creation was invoked, and certainly ended it at its return only if
//     it took effect (ok) and was invoked after g's creation returned;
//   - signals to a replaced generation return −1: a count-down invoked after
//     its generation was certainly replaced must return −1, and −1 only when
//     a replacement may have ended it before it returned (a delete or reset
//     of an earlier generation does not);
//   - Wait returns true only after the count reached 0 in that generation (a
//     count-down of it returned 0, or enough were invoked), and false only
//     when the generation may have been replaced or deleted (as above: a
//     delete or reset before its creation does not count);
//   - no lost or late completion: a wait that ended unanswered (fail: its
//     own deadline passed), or answered true (false), did so within
//     Options.WakeBound of its invocation or of the instant its generation
//     certainly reached 0 or was certainly replaced (reached 0; was
//     replaced), whichever is later (KindStuckWaiter).
//
// A generation whose create/reset is not in the history has an unknown
// initial count: only the rules that do not need it apply.
func CheckLatch(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	type genKey struct {
		key string
		gen int64
	}
	gens := make(map[genKey]*latchGen)
	get := func(key string, gen int64) *latchGen {
		g := gens[genKey{key, gen}]
		if g == nil {
			g = &latchGen{first: history.Never, mayReplace: history.Never, replaced: history.Never}
			gens[genKey{key, gen}] = g
		}
		return g
	}
	// fail records a violation about generation g, with its reach for Judge:
	// the generation's state was made from its first operation on, and the
	// violating operation op spans its invocation to its return; a lost
	// write (a failover, a restart) can explain it only if that state
	// existed when the loss struck.
	// since is the write whose loss would explain the violation (the
	// generation's creation unless the rule names a later one: the reset
	// that replaced it, the count-downs that completed, the earlier of two
	// equal answers, the count-down that reached zero).
	failSince := func(kind string, since int64, op *history.Operation, msg string, ops ...*history.Operation) {
		c.fail(kind, op.Key, msg, ops...)
		since = min(since, op.T)
		ln := history.Never
		if op.Return != history.Never {
			ln = op.Return - op.T
		}
		c.reaches = append(c.reaches, Reach{Kind: kind, Key: op.Key, Since: since, First: op.T, Last: op.T, Len: ln, Horizon: history.Never})
	}
	fail := func(kind string, g *latchGen, op *history.Operation, msg string, ops ...*history.Operation) {
		failSince(kind, g.first, op, msg, ops...)
	}
	reps := make(map[string][]replacement)
	n := 0
	for k := range h.Ops {
		op := &h.Ops[k]
		if !isLatchOp(op.F) {
			continue
		}
		n++
		if op.Gen != 0 {
			if g := get(op.Key, op.Gen); op.T < g.first {
				g.first = op.T
			}
		}
		switch op.F {
		case history.FLatchCreate, history.FLatchReset:
			switch op.Type {
			case history.OK:
				g := get(op.Key, op.Gen)
				if !g.known {
					g.known, g.count, g.created = true, op.Count, op
				}
				reps[op.Key] = append(reps[op.Key], replacement{gen: op.Gen, t: op.T, ret: op.Return, definite: true})
			case history.Info:
				reps[op.Key] = append(reps[op.Key], replacement{anyGen: true, t: op.T, ret: history.Never})
			}
		case history.FLatchDelete:
			if op.Type != history.Fail {
				ret := op.Return
				if op.Type == history.Info {
					ret = history.Never
				}
				reps[op.Key] = append(reps[op.Key], replacement{anyGen: true, t: op.T, ret: ret, definite: op.Type == history.OK})
			}
		case history.FLatchCountDown:
			g := get(op.Key, op.Gen)
			switch {
			case op.Type == history.Info:
				g.infoInv = append(g.infoInv, op.T)
				g.infoOps = append(g.infoOps, op)
			case op.Type == history.OK && op.Count >= 0:
				g.mayInv = append(g.mayInv, op.T)
				g.okRet = append(g.okRet, op.Return)
				if op.Count == 0 {
					g.zeroInvs = append(g.zeroInvs, op.T)
					g.zeroRets = append(g.zeroRets, op.Return)
				}
			}
		}
	}
	// When each generation may have been / certainly was replaced.
	index := make(map[string]*repIndex, len(reps))
	for key, rs := range reps {
		index[key] = newRepIndex(rs)
	}
	for gk, g := range gens {
		if ix := index[gk.key]; ix != nil {
			g.mayReplace, g.replaced = ix.replacement(gk.gen, g.created)
		}
		// An uncertain count-down invoked after its generation was
		// certainly replaced found another generation (or none) in its
		// place: it cannot have decremented this one.
		// That holds only if the replacement was not lost: a failover or
		// restart that lost the reset left this generation in place, and
		// those count-downs then decremented it (lateInv: a shortfall they
		// close is KindLatch, which the loss of the reset explains, not
		// KindLatchDecrementedTwice).
		for n, t := range g.infoInv {
			if t <= g.replaced {
				g.mayInv = append(g.mayInv, t)
			} else {
				g.lateInv = append(g.lateInv, t)
				g.lateOps = append(g.lateOps, g.infoOps[n])
			}
		}
		slices.Sort(g.lateInv)
		slices.SortFunc(g.lateOps, func(a, b *history.Operation) int { return cmpInt(a.T, b.T) })
		slices.Sort(g.mayInv)
		slices.Sort(g.okRet)
		slices.Sort(g.zeroInvs)
		slices.Sort(g.zeroRets)
	}
	countLE := func(s []int64, t int64) int { return sort.Search(len(s), func(n int) bool { return s[n] > t }) }
	countLT := func(s []int64, t int64) int { return sort.Search(len(s), func(n int) bool { return s[n] >= t }) }
	seen := make(map[genKey]map[int64]*history.Operation) // remaining r ≥ 1 → count-down
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.Type != history.OK || (op.F != history.FLatchCountDown && op.F != history.FLatchWait) {
			continue
		}
		g := gens[genKey{op.Key, op.Gen}]
		if g == nil {
			g = get(op.Key, op.Gen)
		}
		if op.F == history.FLatchWait {
			switch op.Value {
			case history.ValueTrue:
				if countLE(g.zeroInvs, op.Return) > 0 || (g.known && int64(countLE(g.mayInv, op.Return)) >= g.count) {
					continue
				}
				if !g.known {
					c.undecided(op.Key, fmt.Sprintf("wait on generation %d returned true: its initial count is not in the history and no count-down returned 0", op.Gen), op)
					continue
				}
				fail(KindLatch, g, op, fmt.Sprintf("wait on generation %d returned true at %s, but only %d of %s had been invoked",
					op.Gen, fmtT(op.Return), countLE(g.mayInv, op.Return), Plural(g.count, "count-down")), g.created, op)
			case history.ValueFalse:
				if g.mayReplace > op.Return {
					fail(KindLatch, g, op, fmt.Sprintf("wait on generation %d returned false at %s, but the generation was neither replaced nor deleted", op.Gen, fmtT(op.Return)), g.created, op)
				}
			}
			continue
		}
		r := op.Count
		switch {
		case r < -1:
			fail(KindLatchUnderflow, g, op, fmt.Sprintf("count-down of generation %d returned %d: underflow", op.Gen, r), g.created, op)
			continue
		case r == -1:
			if g.mayReplace > op.Return {
				fail(KindLatch, g, op, fmt.Sprintf("count-down of generation %d returned -1 at %s, but the generation had not been replaced or deleted", op.Gen, fmtT(op.Return)), g.created, op)
			}
			continue
		}
		if g.replaced < op.T {
			failSince(KindLatch, g.mayReplace, op, fmt.Sprintf("count-down invoked at %s, after generation %d was replaced at %s, returned %d instead of -1",
				fmtT(op.T), op.Gen, fmtT(g.replaced), r), g.created, op)
			continue
		}
		if g.known {
			if r >= g.count && !(r == 0 && g.count == 0) {
				fail(KindLatchDecrementedTwice, g, op, fmt.Sprintf("count-down of generation %d (initial count %d) returned %d: no decrement", op.Gen, g.count, r), g.created, op)
				continue
			}
			if inv := int64(countLE(g.mayInv, op.Return)); inv < g.count-r {
				// The uncertain count-downs invoked after the generation
				// was certainly replaced decremented it if the replacement
				// was lost: a shortfall they close is a lost reset (or
				// delete), KindLatch, whose write is the replacement
				// (Since: the earliest instant it may have taken effect).
				if late := countLE(g.lateInv, op.Return); inv+int64(late) >= g.count-r {
					ops := append([]*history.Operation{g.created}, g.lateOps[:late]...)
					failSince(KindLatch, g.mayReplace, op, fmt.Sprintf("count-down of generation %d returned %d (initial count %d) when %s had been invoked before it was replaced at %s: "+
						"only the %s invoked after that could have made up the difference, had the replacement been lost",
						op.Gen, r, g.count, Plural(inv, "count-down"), fmtT(g.replaced), Plural(int64(late), "uncertain count-down")), append(ops, op)...)
					continue
				}
				fail(KindLatchDecrementedTwice, g, op, fmt.Sprintf("count-down of generation %d returned %d (initial count %d) when at most %s had been invoked: decremented more than once",
					op.Gen, r, g.count, Plural(inv, "count-down")), g.created, op)
				continue
			}
			if done := int64(countLT(g.okRet, op.T)); r > max(g.count-done-1, 0) {
				failSince(KindLatch, firstOr(g.mayInv, g.first), op, fmt.Sprintf("count-down of generation %d returned %d (initial count %d) after %s had completed: a decrement was lost",
					op.Gen, r, g.count, Plural(done, "count-down")), g.created, op)
				continue
			}
		}
		if r >= 1 {
			gk := genKey{op.Key, op.Gen}
			if seen[gk] == nil {
				seen[gk] = make(map[int64]*history.Operation)
			}
			if prev := seen[gk][r]; prev != nil {
				failSince(KindLatch, prev.T, op, fmt.Sprintf("two count-downs of generation %d both returned %d", op.Gen, r), prev, op)
			} else {
				seen[gk][r] = op
			}
		}
	}
	// No lost completion: a wait must be answered within WakeBound of its
	// generation certainly reaching zero (a count-down of it returned 0, or
	// it was created with count 0: true) or being certainly replaced
	// (false), whichever came first; a wait that ended unanswered (fail: its
	// deadline passed) or answered late outlived it. A waiter that only
	// polls, slower than the bound, fails it even when it answers.
	bound := int64(o.WakeBound)
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F != history.FLatchWait || op.Return == history.Never || op.Type == history.Info {
			continue
		}
		g := gens[genKey{op.Key, op.Gen}]
		if g == nil {
			continue
		}
		// A wait answers true from the generation's zero; false from its
		// replacement, or sooner (true) if it reached zero first; unanswered
		// (fail), whichever came first.
		var zero int64 = history.Never
		zeroHow := ""
		if g.known && g.count == 0 {
			zero, zeroHow = g.created.Return, "was created with count 0"
		}
		if len(g.zeroRets) > 0 && g.zeroRets[0] < zero {
			zero, zeroHow = g.zeroRets[0], "reached 0"
		}
		// made: when the write that marked end was invoked (the count-down
		// that reached zero, the creation with count 0, the replacement).
		zeroMade := g.first
		if zeroHow == "reached 0" && len(g.zeroInvs) > 0 {
			zeroMade = g.zeroInvs[0]
		}
		end, how, made := g.replaced, "was replaced or deleted", g.mayReplace
		switch {
		case op.Type == history.OK && op.Value == history.ValueTrue:
			end, how, made = zero, zeroHow, zeroMade
		case zero < end:
			end, how, made = zero, zeroHow, zeroMade
		}
		if end == history.Never {
			continue
		}
		if deadline := max(end, op.T) + bound; op.Return > deadline {
			what, kind := "ended unanswered", "a lost completion"
			if op.Type == history.OK {
				what, kind = "answered "+op.Value, "a late completion"
			}
			failSince(KindStuckWaiter, made, op, fmt.Sprintf("wait on generation %d (invoked at %s) %s at %s, though the generation %s at %s: "+
				"not answered within %v (%s)", op.Gen, fmtT(op.T), what, fmtT(op.Return), how, fmtT(end), o.WakeBound, kind), g.created, op)
		}
	}
	r := c.result("latch", n, fmt.Sprintf("%s on %s: counts, waits and replacements consistent", Plural(n, "latch operation"), Plural(len(gens), "generation")))
	r.Elapsed = time.Since(start)
	return r
}

func cmpInt(a, b int64) int { return cmp.Compare(a, b) }

// replacement is a write that may put another generation in a latch key's
// place: an ok create or reset (gen: the generation it made), a reset of
// unknown outcome or a delete (anyGen: it may end whatever generation is
// there).
type replacement struct {
	gen      int64 // gen created; 0 with anyGen
	anyGen   bool  // unknown outcome or a delete: may replace every generation
	t, ret   int64 // invocation; return (Never when unknown)
	definite bool  // certainly took effect by ret
}

// repIndex answers, for one key, when each generation may have been and
// certainly was replaced. A replacement replaces only the generations
// before it: it may replace generation g if it may have taken effect after
// g's creation did (it did not return before g's creation was invoked;
// equal times are concurrent), and certainly did so at its return if it
// certainly took effect (ok) and was invoked after g's creation returned.
// Gen numbers follow the order the history saw the generations, not the
// order their writes took effect (two concurrent resets may be numbered
// either way), so they decide nothing for a generation whose creation is
// in the history. For one whose creation is not (made before the history
// began, or by a reset of unknown outcome), an ok reset with a larger gen
// and any delete or reset of unknown outcome may have replaced it, and an
// ok reset with a larger gen certainly did at its return.
type repIndex struct {
	byRet   []replacement // sorted by return
	mayT    []sufMin      // over byRet[n:]: the earliest invocations
	byT     []replacement // the definite ones, sorted by invocation
	defRet  []sufMin      // over byT[n:]: the earliest returns
	gens    []int64       // ok resets' gens, sorted
	sufT    []int64       // over resets with gen ≥ gens[n]: earliest invocation
	sufRet  []int64       // … and earliest return
	anyT    int64         // earliest invocation of an any-gen replacement
	ownGens map[int64]int // how many ok creates/resets made each gen
}

// sufMin is the smallest and second smallest value over a suffix, with the
// gen of the smallest (0 for an any-gen replacement), so that a
// generation's own creation can be left out.
type sufMin struct {
	v1, v2 int64
	gen1   int64
}

func (m sufMin) add(v, gen int64) sufMin {
	switch {
	case v < m.v1:
		return sufMin{v1: v, v2: m.v1, gen1: gen}
	case v < m.v2:
		m.v2 = v
	}
	return m
}

// without is the smallest value, leaving out one replacement of gen (a
// generation's own creation).
func (m sufMin) without(gen int64) int64 {
	if gen != 0 && m.gen1 == gen {
		return m.v2
	}
	return m.v1
}

func newRepIndex(rs []replacement) *repIndex {
	ix := &repIndex{anyT: history.Never, ownGens: map[int64]int{}}
	genOf := func(r replacement) int64 {
		if r.anyGen {
			return 0
		}
		return r.gen
	}
	ix.byRet = slices.Clone(rs)
	slices.SortFunc(ix.byRet, func(a, b replacement) int { return cmpInt(a.ret, b.ret) })
	ix.mayT = make([]sufMin, len(ix.byRet)+1)
	ix.mayT[len(ix.byRet)] = sufMin{v1: history.Never, v2: history.Never}
	for n := len(ix.byRet) - 1; n >= 0; n-- {
		ix.mayT[n] = ix.mayT[n+1].add(ix.byRet[n].t, genOf(ix.byRet[n]))
	}
	var resets []replacement
	for _, r := range rs {
		if r.definite {
			ix.byT = append(ix.byT, r)
		}
		if r.anyGen {
			ix.anyT = min(ix.anyT, r.t)
		} else {
			resets = append(resets, r)
			ix.ownGens[r.gen]++
		}
	}
	slices.SortFunc(ix.byT, func(a, b replacement) int { return cmpInt(a.t, b.t) })
	ix.defRet = make([]sufMin, len(ix.byT)+1)
	ix.defRet[len(ix.byT)] = sufMin{v1: history.Never, v2: history.Never}
	for n := len(ix.byT) - 1; n >= 0; n-- {
		ix.defRet[n] = ix.defRet[n+1].add(ix.byT[n].ret, genOf(ix.byT[n]))
	}
	slices.SortFunc(resets, func(a, b replacement) int { return cmpInt(a.gen, b.gen) })
	ix.gens = make([]int64, len(resets))
	ix.sufT = make([]int64, len(resets)+1)
	ix.sufRet = make([]int64, len(resets)+1)
	ix.sufT[len(resets)], ix.sufRet[len(resets)] = history.Never, history.Never
	for n := len(resets) - 1; n >= 0; n-- {
		ix.gens[n] = resets[n].gen
		ix.sufT[n] = min(ix.sufT[n+1], resets[n].t)
		ix.sufRet[n] = min(ix.sufRet[n+1], resets[n].ret)
	}
	return ix
}

// replacement returns the earliest instant at which generation gen, made
// by created (nil when its creation is not in the history), may have been
// replaced or deleted, and the earliest by which it certainly was (Never
// when not).
func (ix *repIndex) replacement(gen int64, created *history.Operation) (may, certain int64) {
	if created == nil {
		m := sort.Search(len(ix.gens), func(n int) bool { return ix.gens[n] > gen })
		return min(ix.sufT[m], ix.anyT), ix.sufRet[m]
	}
	// Its own creation is left out once (a gen is made once).
	own := gen
	if ix.ownGens[gen] == 0 {
		own = 0
	}
	m := sort.Search(len(ix.byRet), func(n int) bool { return ix.byRet[n].ret >= created.T })
	if t := ix.mayT[m].without(own); t != history.Never {
		may = max(t, created.T)
	} else {
		may = history.Never
	}
	d := sort.Search(len(ix.byT), func(n int) bool { return ix.byT[n].t > created.Return })
	certain = ix.defRet[d].without(own)
	return may, certain
}

// firstOr is the first of a sorted s, or or when s is empty.
func firstOr(s []int64, or int64) int64 {
	if len(s) == 0 {
		return or
	}
	return s[0]
}
