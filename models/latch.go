package models

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

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
	mayInv   []int64
	okRet    []int64
	zeroInvs []int64 // invocations of ok count-downs that returned 0
	zeroRets []int64 // returns of ok count-downs that returned 0
}

// CheckLatch checks countdown latches, per key and generation (gen):
//
//   - no underflow: a count-down returns −1 or a remaining count in
//     [0, initial count − 1];
//   - each call decrements once: reaching remaining r needs initial − r
//     count-downs invoked before it returned; r cannot stay above
//     initial − 1 − (count-downs completed before it was invoked); no two
//     count-downs return the same r ≥ 1;
//   - signals to a replaced generation return −1: a count-down invoked after
//     a reset with a larger gen (or a delete) returned must return −1, and −1
//     only when such a reset or delete may have happened before it returned;
//   - Wait returns true only after the count reached 0 in that generation (a
//     count-down of it returned 0, or enough were invoked), and false only
//     when the generation may have been replaced or deleted;
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
	type replacement struct {
		gen      int64 // gen created; 0 with anyGen
		anyGen   bool  // unknown outcome or a delete: may replace every generation
		t, ret   int64
		definite bool
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
				reps[op.Key] = append(reps[op.Key], replacement{anyGen: true, t: op.T, ret: op.Return, definite: op.Type == history.OK})
			}
		case history.FLatchCountDown:
			g := get(op.Key, op.Gen)
			switch {
			case op.Type == history.Info:
				g.mayInv = append(g.mayInv, op.T)
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
	// When each generation may have been / certainly was replaced: per key,
	// replacements sorted by gen with suffix minima, deletes (and resets of
	// unknown outcome) sorted by invocation with suffix minima.
	type repIndex struct {
		gens         []int64
		sufT, sufRet []int64 // over resets with gen ≥ gens[n]
		anyT         int64   // earliest invocation of an any-gen replacement
		delT, delRet []int64 // definite deletes by invocation; suffix min of returns
	}
	index := make(map[string]*repIndex, len(reps))
	for key, rs := range reps {
		ix := &repIndex{anyT: history.Never}
		var defs, dels []replacement
		for _, r := range rs {
			switch {
			case r.anyGen:
				ix.anyT = min(ix.anyT, r.t)
				if r.definite {
					dels = append(dels, r)
				}
			default:
				defs = append(defs, r)
			}
		}
		slices.SortFunc(defs, func(a, b replacement) int { return cmpInt(a.gen, b.gen) })
		ix.gens = make([]int64, len(defs))
		ix.sufT = make([]int64, len(defs)+1)
		ix.sufRet = make([]int64, len(defs)+1)
		ix.sufT[len(defs)], ix.sufRet[len(defs)] = history.Never, history.Never
		for n := len(defs) - 1; n >= 0; n-- {
			ix.gens[n] = defs[n].gen
			ix.sufT[n] = min(ix.sufT[n+1], defs[n].t)
			ix.sufRet[n] = min(ix.sufRet[n+1], defs[n].ret)
		}
		slices.SortFunc(dels, func(a, b replacement) int { return cmpInt(a.t, b.t) })
		ix.delT = make([]int64, len(dels))
		ix.delRet = make([]int64, len(dels)+1)
		ix.delRet[len(dels)] = history.Never
		for n := len(dels) - 1; n >= 0; n-- {
			ix.delT[n] = dels[n].t
			ix.delRet[n] = min(ix.delRet[n+1], dels[n].ret)
		}
		index[key] = ix
	}
	for gk, g := range gens {
		if ix := index[gk.key]; ix != nil {
			m := sort.Search(len(ix.gens), func(n int) bool { return ix.gens[n] > gk.gen })
			g.mayReplace = min(ix.sufT[m], ix.anyT)
			g.replaced = ix.sufRet[m]
			if g.created != nil {
				// A delete replaces g for sure only if g existed by then.
				d := sort.Search(len(ix.delT), func(n int) bool { return ix.delT[n] > g.created.Return })
				g.replaced = min(g.replaced, ix.delRet[d])
			}
		}
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
				fail(KindLatch, g, op, fmt.Sprintf("count-down of generation %d (initial count %d) returned %d: no decrement", op.Gen, g.count, r), g.created, op)
				continue
			}
			if inv := int64(countLE(g.mayInv, op.Return)); inv < g.count-r {
				fail(KindLatch, g, op, fmt.Sprintf("count-down of generation %d returned %d (initial count %d) when at most %s had been invoked: decremented more than once",
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

// firstOr is the first of a sorted s, or or when s is empty.
func firstOr(s []int64, or int64) int64 {
	if len(s) == 0 {
		return or
	}
	return s[0]
}
