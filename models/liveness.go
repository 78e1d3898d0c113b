package models

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// CheckLiveness checks waiting acquisitions (acquire_wait) of exclusive
// locks: when the lock becomes free while a process waits for it, some
// process must acquire it within Options.WakeBound, so no waiter sleeps
// through a free lock, or forever.
//
// The lock is certainly free by freedAt: the return of an ok release that
// released it, else the holder's latest possible expiry (its last
// acquisition or renewal's return + ttl, + Drift). It stays free until the
// first acquisition that may have taken it: an ok acquisition returning at
// or after the instant the lease may have gone (the release's invocation, or
// the earliest expiry), or an acquisition of unknown outcome that may have
// taken effect by then (an info one between its invocation and completion;
// one still in flight at the end of the history within the last WakeBound,
// since a grant reaches its client within the bound).
// A waiter W (waiting from its invocation until its completion, or until the
// end of the history if it never completed) violates liveness when the lock
// stayed free, with W waiting, past max(freedAt, W.T) + WakeBound. With
// Options.LostNotifications a waiter already sleeping at the release only
// has to wake by the released lease's latest expiry + Drift + WakeBound.
//
// A lock held when the history starts, or with no expiry and no release,
// is never known to be free. O(n log n).
func CheckLiveness(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	drift, bound := int64(o.Drift), int64(o.WakeBound)
	hs := buildHolds(h, drift, func(m mode) bool { return m == modeExclusive }, o.UncertainRenewalReleases)
	type acqs struct {
		okRet   []int64 // returns of ok acquisitions
		okIdx   []int
		infoRet []int64 // info acquisitions by return (Never if not completed) ...
		infoMin []int64 // ... with the suffix minimum of their invocations
		infoIdx []int
		waiters []int // acquire_wait operations, by invocation
	}
	per := make(map[lockID]*acqs)
	get := func(id lockID) *acqs {
		a := per[id]
		if a == nil {
			a = &acqs{}
			per[id] = a
		}
		return a
	}
	nWaiters := 0
	for k := range h.Ops {
		op := &h.Ops[k]
		m, waits := acquireMode(op.F)
		if m != modeExclusive {
			continue
		}
		a := get(idOf(op))
		switch op.Type {
		case history.OK:
			a.okRet = append(a.okRet, op.Return)
			a.okIdx = append(a.okIdx, k)
		case history.Info:
			a.infoIdx = append(a.infoIdx, k)
		}
		if waits {
			a.waiters = append(a.waiters, k)
			nWaiters++
		}
	}
	type waitIndex struct {
		t      []int64 // waiter invocations, ascending
		maxEnd []int   // prefix argmax of wait end
		dur    *argMaxTree
	}
	wEnd := func(k int) int64 {
		if op := &h.Ops[k]; op.Done {
			return op.Return
		}
		return h.End
	}
	// An acquisition of unknown outcome may have taken the lock from its
	// invocation on; one still in flight at the end of the history only in
	// its last WakeBound (a grant reaches the client within the bound).
	mayAcquireFrom := func(op *history.Operation) int64 {
		if op.Done {
			return op.T
		}
		return max(op.T, h.End-bound)
	}
	windex := make(map[lockID]*waitIndex)
	for id, a := range per {
		sortByKey(a.okIdx, func(k int) int64 { return h.Ops[k].Return })
		for n, k := range a.okIdx {
			a.okRet[n] = h.Ops[k].Return
		}
		sortByKey(a.infoIdx, func(k int) int64 { return h.Ops[k].Return })
		a.infoRet = make([]int64, len(a.infoIdx))
		a.infoMin = make([]int64, len(a.infoIdx)+1)
		a.infoMin[len(a.infoIdx)] = history.Never
		for n := len(a.infoIdx) - 1; n >= 0; n-- {
			op := &h.Ops[a.infoIdx[n]]
			a.infoRet[n] = op.Return
			a.infoMin[n] = min(a.infoMin[n+1], mayAcquireFrom(op))
		}
		sortByKey(a.waiters, func(k int) int64 { return h.Ops[k].T })
		wi := &waitIndex{t: make([]int64, len(a.waiters)), maxEnd: make([]int, len(a.waiters))}
		durs := make([]int64, len(a.waiters))
		for n, k := range a.waiters {
			wi.t[n] = h.Ops[k].T
			wi.maxEnd[n] = n
			if n > 0 && wEnd(a.waiters[wi.maxEnd[n-1]]) >= wEnd(k) {
				wi.maxEnd[n] = wi.maxEnd[n-1]
			}
			durs[n] = wEnd(k) - h.Ops[k].T
		}
		wi.dur = newArgMaxTree(durs)
		windex[id] = wi
	}
	events := 0
	for hk := range hs.holds {
		hd := &hs.holds[hk]
		if hd.superseded || hd.freedAt == history.Never {
			continue
		}
		a, wi := per[hd.id], windex[hd.id]
		if a == nil || len(a.waiters) == 0 {
			continue
		}
		events++
		from := hd.freedFrom
		// First acquisition that may have taken the freed lock.
		served, servedBy := history.Never, -1
		if n := sort.Search(len(a.okRet), func(n int) bool { return a.okRet[n] >= from }); n < len(a.okRet) {
			served, servedBy = a.okRet[n], a.okIdx[n]
		}
		if n := sort.Search(len(a.infoRet), func(n int) bool { return a.infoRet[n] >= from }); n < len(a.infoRet) {
			if t := max(a.infoMin[n], from); t < served {
				served, servedBy = t, -1
				for _, k := range a.infoIdx[n:] {
					if mayAcquireFrom(&h.Ops[k]) == a.infoMin[n] {
						servedBy = k
						break
					}
				}
			}
		}
		// Waiters already waiting when it was freed.
		sleepBase := hd.freedAt
		if o.LostNotifications && hd.released {
			sleepBase = history.Never
			if hd.expiry != history.Never {
				sleepBase = max(hd.freedAt, addSat(hd.expiry, drift))
			}
		}
		var culprit = -1
		var deadline int64
		if m := sort.Search(len(wi.t), func(n int) bool { return wi.t[n] > hd.freedAt }); m > 0 && sleepBase != history.Never {
			w := a.waiters[wi.maxEnd[m-1]]
			if d := addSat(sleepBase, bound); d < min(served, wEnd(w)) {
				culprit, deadline = w, d
			}
		}
		// Waiters that arrived while it was free.
		if culprit < 0 {
			lo := sort.Search(len(wi.t), func(n int) bool { return wi.t[n] > hd.freedAt })
			hi := sort.Search(len(wi.t), func(n int) bool { return wi.t[n] >= served-bound })
			if lo < hi {
				if n, d := wi.dur.query(lo, hi); d > bound {
					culprit = a.waiters[n]
					deadline = addSat(h.Ops[culprit].T, bound)
				}
			}
		}
		if culprit < 0 {
			continue
		}
		w := &h.Ops[culprit]
		how := "released"
		if !hd.released {
			how = "expired"
		}
		next := "no acquisition followed"
		if served != history.Never {
			next = "the next acquisition that may have taken it: " + fmtT(served)
		}
		ops := holdOps(h, hd)
		ops = append(ops, w)
		if servedBy >= 0 && servedBy != culprit {
			ops = append(ops, &h.Ops[servedBy])
		}
		c.fail(KindStuckWaiter, hd.id.String(), fmt.Sprintf("lock %s by %s; proc %d waiting since %s had not acquired it by the deadline %s (bound %v; %s)",
			how, fmtT(hd.freedAt), w.Process, fmtT(w.T), fmtT(deadline), o.WakeBound, next), ops...)
	}
	r := c.result("liveness", nWaiters, fmt.Sprintf("%s, %s: every waiter served within %v", Plural(nWaiters, "waiting acquisition"), Plural(events, "free-lock event"), o.WakeBound))
	r.Elapsed = time.Since(start)
	return r
}

// sortByKey sorts indices by key(index), stably.
func sortByKey(idx []int, key func(int) int64) {
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(key(a), key(b)) })
}

// argMaxTree answers range argmax queries over a static array.
type argMaxTree struct {
	n   int
	v   []int64
	arg []int
}

func newArgMaxTree(v []int64) *argMaxTree {
	n := 1
	for n < len(v) {
		n *= 2
	}
	t := &argMaxTree{n: n, v: v, arg: make([]int, 2*n)}
	for i := range n {
		t.arg[n+i] = -1
		if i < len(v) {
			t.arg[n+i] = i
		}
	}
	for i := n - 1; i > 0; i-- {
		t.arg[i] = t.better(t.arg[2*i], t.arg[2*i+1])
	}
	return t
}

func (t *argMaxTree) better(a, b int) int {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	case t.v[b] > t.v[a]:
		return b
	}
	return a
}

// query returns the index and value of the maximum over [l, r), l < r.
func (t *argMaxTree) query(l, r int) (int, int64) {
	best := -1
	for l, r = l+t.n, r+t.n; l < r; l, r = l>>1, r>>1 {
		if l&1 == 1 {
			best = t.better(best, t.arg[l])
			l++
		}
		if r&1 == 1 {
			r--
			best = t.better(best, t.arg[r])
		}
	}
	return best, t.v[best]
}
