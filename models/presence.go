package models

import (
	"cmp"
	"slices"
	"sort"

	"github.com/coordtorture/coordtorture/history"
)

// The checkers' Reach.Since for a violation that needs a lease gone is the
// latest proof of presence of that lease by the violation (holdSet.presentBy,
// issue 30 rule 1). Computed for every violation by scanning every open
// window, or every earlier operation of an owner, it made the checkers
// quadratic on histories that violate a lot (n grants without ttl, never
// released: every grant overlaps every earlier one). The helpers here keep
// them O(n log n) on any history: a window's latest proof only grows with
// time, so a sweep in time order keeps, per mode, a lazy max-heap of the
// open windows' latest proofs (presenceSweep), and the semaphore a Fenwick
// tree of the open permits' weight by latest proof (permitPresence).

// proofTable finds the proofs of presence of a lease in O(1).
type proofTable struct {
	ps []proof // holdSet.proofs, by lease
	lo []int32 // lo[acq]: the first of the lease acquired by History.Ops[acq]; lo[acq+1] ends them
}

func newProofTable(h *history.History, set *holdSet) *proofTable {
	if !set.sorted {
		// As presentBy: stable, each lease's proofs stay in invocation order.
		slices.SortStableFunc(set.proofs, func(a, b proof) int { return cmp.Compare(a.acq, b.acq) })
		set.sorted = true
	}
	pt := &proofTable{ps: set.proofs, lo: make([]int32, len(h.Ops)+1)}
	for _, p := range set.proofs {
		pt.lo[p.acq+1]++
	}
	for k := 1; k < len(pt.lo); k++ {
		pt.lo[k] += pt.lo[k-1]
	}
	return pt
}

// of returns the proofs of presence of the lease acquired by
// History.Ops[acq], in invocation order.
func (pt *proofTable) of(acq int) []proof { return pt.ps[pt.lo[acq]:pt.lo[acq+1]] }

// proofsBy is presentBy's value for a lease acquired (invoked) at acqT whose
// proofs are ps, at t, and the index in ps of its first proof invoked after t.
func proofsBy(ps []proof, acqT, t int64) (at int64, next int) {
	next = sort.Search(len(ps), func(n int) bool { return ps[n].t > t })
	if next > 0 {
		return max(ps[next-1].t, acqT), next
	}
	return acqT, next
}

// heapOf is a binary heap ordered by less (less(a, b): a comes out first).
type heapOf[T any] struct {
	s    []T
	less func(a, b T) bool
}

func (q *heapOf[T]) len() int { return len(q.s) }
func (q *heapOf[T]) top() T   { return q.s[0] }
func (q *heapOf[T]) reset()   { q.s = q.s[:0] }

func (q *heapOf[T]) push(v T) {
	q.s = append(q.s, v)
	for i := len(q.s) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(q.s[i], q.s[p]) {
			break
		}
		q.s[i], q.s[p] = q.s[p], q.s[i]
		i = p
	}
}

func (q *heapOf[T]) pop() T {
	v := q.s[0]
	n := len(q.s) - 1
	q.s[0] = q.s[n]
	q.s = q.s[:n]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && q.less(q.s[l], q.s[m]) {
			m = l
		}
		if r < n && q.less(q.s[r], q.s[m]) {
			m = r
		}
		if m == i {
			break
		}
		q.s[i], q.s[m] = q.s[m], q.s[i]
		i = m
	}
	return v
}

// presenceSweep answers, during sweepConflicts' sweep over one lock's windows
// in order of start, the latest presentBy among the windows of a mode added
// so far and still open at the current instant. Each window's entries are
// pushed once per proof it sees while open; closed windows are popped lazily
// (the sweep's instant never goes back). O(log n) amortised per window and
// proof.
type presenceSweep struct {
	h    *history.History
	set  *holdSet
	pt   *proofTable
	open [modePermit]heapOf[presence] // per mode, max-heap by at
	next heapOf[pendingProof]         // the next proof of each open window, min-heap by t
}

type presence struct {
	at int64 // presentBy of hold k as of when pushed
	k  int32
}

type pendingProof struct {
	t int64 // the proof's invocation
	k int32 // the hold
	i int32 // its index in proofTable.of(k's acquisition)
}

func newPresenceSweep(h *history.History, set *holdSet) *presenceSweep {
	ps := &presenceSweep{h: h, set: set, pt: newProofTable(h, set)}
	for m := range ps.open {
		ps.open[m].less = func(a, b presence) bool { return a.at > b.at }
	}
	ps.next.less = func(a, b pendingProof) bool { return a.t < b.t }
	return ps
}

// reset starts another lock.
func (ps *presenceSweep) reset() {
	for m := range ps.open {
		ps.open[m].reset()
	}
	ps.next.reset()
}

// advance takes in the proofs invoked by t of the open windows.
func (ps *presenceSweep) advance(t int64) {
	for ps.next.len() > 0 && ps.next.top().t <= t {
		p := ps.next.pop()
		hd := &ps.set.holds[p.k]
		if hd.end <= t {
			continue // closed for good: never asked about again
		}
		proofs := ps.pt.of(hd.acq)
		at, next := proofsBy(proofs, ps.h.Ops[hd.acq].T, t)
		ps.open[hd.mode].push(presence{at, p.k})
		if next < len(proofs) {
			ps.next.push(pendingProof{proofs[next].t, p.k, int32(next)})
		}
	}
}

// add takes in window k, open from t (its start, the sweep's instant).
func (ps *presenceSweep) add(k int32, t int64) {
	hd := &ps.set.holds[k]
	proofs := ps.pt.of(hd.acq)
	at, next := proofsBy(proofs, ps.h.Ops[hd.acq].T, t)
	ps.open[hd.mode].push(presence{at, k})
	if next < len(proofs) {
		ps.next.push(pendingProof{proofs[next].t, k, int32(next)})
	}
}

// latest is the latest presentBy(·, t) among the windows of mode m added and
// open at t (end > t), and whether there is one; advance(t) first.
func (ps *presenceSweep) latest(m mode, t int64) (int64, bool) {
	q := &ps.open[m]
	for q.len() > 0 && ps.set.holds[q.top().k].end <= t {
		q.pop()
	}
	if q.len() == 0 {
		return 0, false
	}
	return q.top().at, true
}

// permitPresence answers lostSince during CheckSemaphore's sweep over one
// semaphore's window starts and ends: the open permits' weight, by each
// one's latest proof of presence (presentBy at the sweep's instant), in a
// Fenwick tree over every value a presentBy can take. O(log n) per start,
// end, proof and query.
type permitPresence struct {
	vals   []int64 // the values presentBy can take, sorted, distinct
	tree   []int64 // Fenwick tree of weight by index in vals
	total  int64
	cur    []int32       // by hold: an open permit's index in vals, -1 when not open
	start  []int32       // by hold: its presentBy at its start, index in vals
	proofs []permitProof // proofs of presence inside windows, by t
	np     int           // proofs taken in
}

type permitProof struct {
	t int64
	k int32
	v int32 // index in vals
}

// newPermitPresence prepares for the windows ks (non-empty, of positive
// weights) of one semaphore, with cur and start of len(set.holds) (reused
// from one semaphore to the next: only ks's entries are read or written).
func newPermitPresence(h *history.History, set *holdSet, pt *proofTable, ks []int32, cur, start []int32) *permitPresence {
	pp := &permitPresence{cur: cur, start: start}
	starts := make([]int64, len(ks))
	var pv []int64
	for n, k := range ks {
		hd := &set.holds[k]
		acqT := h.Ops[hd.acq].T
		proofs := pt.of(hd.acq)
		at, next := proofsBy(proofs, acqT, hd.start)
		starts[n] = at
		pp.vals = append(pp.vals, at)
		// A query at an instant q sees k open only if q ≤ its end.
		for _, p := range proofs[next:] {
			if p.t > hd.end {
				break
			}
			pp.proofs = append(pp.proofs, permitProof{t: p.t, k: k})
			pv = append(pv, max(p.t, acqT))
		}
	}
	pp.vals = append(pp.vals, pv...)
	slices.Sort(pp.vals)
	pp.vals = slices.Compact(pp.vals)
	index := func(v int64) int32 { n, _ := slices.BinarySearch(pp.vals, v); return int32(n) }
	for n, k := range ks {
		pp.start[k], pp.cur[k] = index(starts[n]), -1
	}
	for n := range pp.proofs {
		pp.proofs[n].v = index(pv[n])
	}
	slices.SortStableFunc(pp.proofs, func(a, b permitProof) int { return cmp.Compare(a.t, b.t) })
	pp.tree = make([]int64, len(pp.vals)+1)
	return pp
}

func (pp *permitPresence) addAt(v int32, w int64) {
	pp.total += w
	for i := int(v) + 1; i < len(pp.tree); i += i & -i {
		pp.tree[i] += w
	}
}

// open and close count permit k (of weight w) in and out.
func (pp *permitPresence) open(k int32, w int64) {
	v := pp.start[k]
	pp.cur[k] = v
	pp.addAt(v, w)
}

func (pp *permitPresence) close(k int32, w int64) {
	if v := pp.cur[k]; v >= 0 {
		pp.addAt(v, -w)
		pp.cur[k] = -1
	}
}

// lostSince is lostSince(…) at t: the earliest presentBy by which the open
// permits other than grant weigh excess (history.Never: they cannot).
func (pp *permitPresence) lostSince(set *holdSet, grant int32, t, excess int64) int64 {
	for ; pp.np < len(pp.proofs) && pp.proofs[pp.np].t <= t; pp.np++ {
		p := pp.proofs[pp.np]
		if v := pp.cur[p.k]; v >= 0 && p.v > v {
			w := set.holds[p.k].weight
			pp.addAt(v, -w)
			pp.addAt(p.v, w)
			pp.cur[p.k] = p.v
		}
	}
	if v := pp.cur[grant]; v >= 0 {
		gw := set.holds[grant].weight
		pp.addAt(v, -gw)
		defer pp.addAt(v, gw)
	}
	if pp.total < excess {
		return history.Never
	}
	// The lowest index whose prefix weight reaches excess.
	pos, rest := 0, excess
	step := 1
	for step*2 < len(pp.tree) {
		step *= 2
	}
	for ; step > 0; step >>= 1 {
		if pos+step < len(pp.tree) && pp.tree[pos+step] < rest {
			pos += step
			rest -= pp.tree[pos]
		}
	}
	return pp.vals[pos]
}
