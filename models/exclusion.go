package models

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// CheckExclusion checks that no two holders of the same lock or lease (an
// exclusive acquisition: acquire, acquire_wait; the lock is (key, field))
// have overlapping validity windows [Return, min(release.T, T+ttl−Drift)).
// Windows are half-open: one ending at the instant the next starts is fine.
// An acquisition of unknown outcome whose owner later proves the lease held
// (an ok renewal, a verify true, a release "released") holds from that
// proof's return (buildHolds): a Redlock acquisition that timed out, say.
// An overlap is a fault's hazard (Judge) only if every earlier lease it
// overlaps was last proven on the server (acquired, renewed ok, verified
// true) before the loss ended: a lease proven after it survived it
// (sweepConflicts).
// O(n log n): sort by start, sweep keeping the furthest end.
func CheckExclusion(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	hs := buildHolds(h, int64(o.Drift), func(m mode) bool { return m == modeExclusive }, o.UncertainRenewalReleases)
	c := newCollector(o)
	sweepConflicts(h, hs, c, int64(o.Drift), func(a, b mode) bool { return true })
	pointConflicts(h, hs, c, int64(o.Drift), func(a, b mode) bool { return true }) // uncertain acquisitions proven only at a proof: holds.go's pointHold
	r := c.result("exclusion", len(hs.holds), fmt.Sprintf("%s on %s, none overlapping", Plural(len(hs.holds), "validity window"), Plural(countIDs(hs.holds), "lock")))
	r.Elapsed = time.Since(start)
	return r
}

// CheckReadWrite checks read/write leases (acquire_read, acquire_write and
// their _wait forms): any number of readers, or one writer, at a time. A
// writer's validity window must not overlap any other holder's; readers'
// windows may overlap each other. Uncertain acquisitions proven later hold
// from their proof, as in CheckExclusion.
func CheckReadWrite(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	hs := buildHolds(h, int64(o.Drift), func(m mode) bool { return m == modeRead || m == modeWrite }, o.UncertainRenewalReleases)
	c := newCollector(o)
	sweepConflicts(h, hs, c, int64(o.Drift), func(a, b mode) bool { return a == modeWrite || b == modeWrite })
	pointConflicts(h, hs, c, int64(o.Drift), func(a, b mode) bool { return a == modeWrite || b == modeWrite })
	r := c.result("rw-exclusion", len(hs.holds), fmt.Sprintf("%s on %s, writers always alone", Plural(len(hs.holds), "read/write window"), Plural(countIDs(hs.holds), "lease")))
	r.Elapsed = time.Since(start)
	return r
}

func countIDs(hs []hold) int {
	seen := make(map[lockID]struct{})
	for k := range hs {
		seen[hs[k].id] = struct{}{}
	}
	return len(seen)
}

// sortedByID orders hold indices by lock (in order of first appearance),
// then start, then end.
func sortedByID(hs []hold) []int32 {
	idx := make([]int32, len(hs))
	for k := range idx {
		idx[k] = int32(k)
	}
	slices.SortFunc(idx, func(x, y int32) int {
		a, b := &hs[x], &hs[y]
		if c := cmp.Compare(a.kid, b.kid); c != 0 {
			return c
		}
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		return cmp.Compare(a.end, b.end)
	})
	return idx
}

// sweepConflicts reports every window that starts before an earlier
// conflicting window of the same lock has ended. It keeps, per lock, the
// furthest-ending window of each mode: a window overlaps some earlier
// window of mode m iff it starts before the furthest end among them.
//
// A fault explains an overlap only by having erased every earlier
// conflicting lease still open when the later window began (the later
// grant, or late renewal, needed them gone): the overlap's Reach.Since is
// the latest instant any of them is known to have been on the server by
// then (holdSet.presentBy: its latest proof of presence, else its
// acquisition), so that an overlap with a lease proven after the loss is
// FAIL (issue 30, rule 1). That latest proof is kept per mode during the
// sweep (presenceSweep), not found by scanning the open windows at each
// overlap: O(n log n) however many windows overlap.
func sweepConflicts(h *history.History, set *holdSet, c *collector, drift int64, conflicts func(a, b mode) bool) {
	hs := set.holds
	idx := sortedByID(hs)
	modes := []mode{modeExclusive, modeRead, modeWrite}
	var furthest [modePermit]int32 // per mode, index of the furthest-ending window, -1 if none
	var cur int32
	// The latest proof of presence among the earlier windows still open,
	// per mode, kept as the sweep goes (O(log n) per window and proof, on
	// any history: presenceSweep). Made at a lock's first overlap
	// (tracking), by replaying the lock's windows so far (from): nothing to
	// pay on a lock without one.
	var present *presenceSweep
	tracking, from := false, 0
	for n, k := range idx {
		hd := &hs[k]
		if n == 0 || hd.kid != cur {
			cur = hd.kid
			for m := range furthest {
				furthest[m] = -1
			}
			tracking, from = false, n
		}
		if tracking {
			present.advance(hd.start)
		}
		if hd.end > hd.start {
			for _, m := range modes {
				f := furthest[m]
				if f < 0 || !conflicts(m, hd.mode) {
					continue
				}
				if other := &hs[f]; other.end > hd.start {
					// Complete when the later window opens; a fault can
					// explain it only if the earlier leases were on the
					// server when it struck, and the later window opened
					// within the earlier lease's ttl after it. Since is the
					// latest presentBy of the earlier conflicting windows
					// open at hd.start (other among them).
					if !tracking {
						if present == nil {
							present = newPresenceSweep(h, set)
						}
						present.reset()
						for _, j := range idx[from:n] {
							if w := &hs[j]; w.end > w.start {
								present.advance(w.start)
								present.add(j, w.start)
							}
						}
						present.advance(hd.start)
						tracking = true
					}
					since := int64(-1)
					for _, m2 := range modes {
						if conflicts(m2, hd.mode) {
							if at, ok := present.latest(m2, hd.start); ok {
								since = max(since, at)
							}
						}
					}
					c.reaches = append(c.reaches, Reach{Kind: KindOverlap, Key: hd.id.String(), Since: since,
						First: hd.start, Last: hd.start, Horizon: horizonOf(other.maxTTL, drift)})
					if c.full(KindOverlap) {
						c.skipAt(KindOverlap, hd.start)
						break
					}
					c.failAt(KindOverlap, hd.id.String(), hd.start, fmt.Sprintf("validity windows overlap: [%s, %s) by proc %d and [%s, %s) by proc %d",
						fmtT(other.start), fmtT(other.end), h.Ops[other.acq].Process, fmtT(hd.start), fmtT(hd.end), h.Ops[hd.acq].Process),
						holdOps(h, other, hd)...)
					break
				}
			}
		}
		if f := furthest[hd.mode]; f < 0 || hd.end > hs[f].end {
			furthest[hd.mode] = k
		}
		if tracking && hd.end > hd.start {
			present.add(k, hd.start)
		}
	}
}

// horizonOf is how long after a fault's effect a lease of ttl (ns; 0: none)
// can still be counted on: its ttl plus the drift allowance.
func horizonOf(ttl, drift int64) int64 {
	if ttl <= 0 {
		return history.Never
	}
	return addSat(ttl, drift)
}

// holdOps lists the acquisitions (and the releases ending them) of holds.
func holdOps(h *history.History, hs ...*hold) []*history.Operation {
	var ops []*history.Operation
	for _, hd := range hs {
		ops = append(ops, &h.Ops[hd.acq])
		if hd.rel >= 0 {
			ops = append(ops, &h.Ops[hd.rel])
		}
	}
	return ops
}

// CheckSemaphore checks that at no instant more than capacity permits of a
// semaphore (sem_acquire, sem_acquire_wait; n permits each, default 1) have
// open validity windows. The capacity is Options.Capacity when positive;
// else each permit is held to the capacity its own acquisition recorded:
// while its window is open, at most that many permits are, whatever the
// other permits recorded (never the largest capacity seen: a permit taken
// with capacity 2 beside live ones taken with 3 makes the third permit over
// its own capacity, and a permit taken with 3 beside a live one taken with 1
// puts two permits over the first one's). A correct semaphore refuses another
// capacity while permits are live (prim: ErrCapacityMismatch), so live
// permits of different capacities only meet after a fault lost some; the
// evidence then names the capacities the live permits recorded. A permit
// that recorded no capacity bounds nothing itself; a key where none did is
// UNKNOWN. O(n log n): sort window starts and ends, sweep (ends before
// starts at equal times: windows are half-open).
// Uncertain acquisitions proven later hold from their proof, as in
// CheckExclusion. Permits over capacity are a fault's hazard (Judge) only if
// enough of the other permits then held to make room for the last grant
// were last proven on the server before the loss ended (lostSince).
func CheckSemaphore(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	drift := int64(o.Drift)
	set := buildHolds(h, drift, func(m mode) bool { return m == modePermit }, o.UncertainRenewalReleases)
	hs := set.holds
	c := newCollector(o)
	capOf := permitCapacities(h, hs, o)
	idx := sortedByID(hs)
	type event struct {
		t    int64
		w    int64 // +weight at a start, −weight at an end
		hold int32
	}
	var events []event
	// For lostSince, made at the first episode over capacity.
	var pt *proofTable
	var curAt, starts []int32
	flush := func(id lockID) {
		if len(events) == 0 {
			return
		}
		if !slices.ContainsFunc(events, func(e event) bool { return capOf[e.hold] > 0 }) {
			c.undecided(id.String(), "no capacity recorded (capacity field) or given (Options.Capacity)")
			events = events[:0]
			return
		}
		slices.SortFunc(events, func(a, b event) int {
			if c := cmp.Compare(a.t, b.t); c != 0 {
				return c
			}
			return cmp.Compare(a.w, b.w) // ends (negative) first
		})
		var held int64
		over := false
		var caps capBound // the capacities of the open windows
		// The open windows, kept by the sweep (where each sits in it, for
		// removal): an episode reads them without scanning every hold.
		var open []int32
		pos := map[int32]int{}
		// The open windows' horizons (a lazy max-heap: closed ones are
		// popped when on top), and their weight by latest proof of presence
		// (lostSince; nil with a weight that is not positive: lostSince
		// scans then), so that an episode costs O(log n), not a scan of
		// every open window. Built at the semaphore's first episode over
		// capacity (tracking; nothing to pay on a history that never is).
		horizons := heapOf[presence]{less: func(a, b presence) bool { return a.at > b.at }}
		var present *permitPresence
		tracking := false
		for n, e := range events {
			held += e.w
			caps.add(capOf[e.hold], e.w > 0)
			limit := caps.min()
			if e.w > 0 {
				pos[e.hold] = len(open)
				open = append(open, e.hold)
				if tracking {
					horizons.push(presence{horizonOf(hs[e.hold].maxTTL, drift), e.hold})
				}
				if present != nil {
					present.open(e.hold, e.w)
				}
			} else if i, ok := pos[e.hold]; ok {
				last := open[len(open)-1]
				open[i], pos[last] = last, i
				open = open[:len(open)-1]
				delete(pos, e.hold)
				if present != nil {
					present.close(e.hold, -e.w)
				}
			}
			if limit > 0 && held > limit && !over {
				over = true
				if !tracking {
					tracking = true
					for _, k := range open {
						horizons.push(presence{horizonOf(hs[k].maxTTL, drift), k})
					}
					if !slices.ContainsFunc(events, func(e event) bool { return hs[e.hold].weight <= 0 }) {
						if pt == nil {
							pt = newProofTable(h, set)
							curAt, starts = make([]int32, len(hs)), make([]int32, len(hs))
						}
						ks := make([]int32, 0, len(events)/2)
						for _, e := range events {
							if e.w > 0 {
								ks = append(ks, e.hold)
							}
						}
						// Replayed up to e.
						present = newPermitPresence(h, set, pt, ks, curAt, starts)
						for _, e := range events[:n+1] {
							if e.w > 0 {
								present.open(e.hold, e.w)
							} else {
								present.close(e.hold, -e.w)
							}
						}
					}
				}
				horizon := int64(0)
				for horizons.len() > 0 {
					if _, ok := pos[horizons.top().k]; ok {
						horizon = horizons.top().at
						break
					}
					horizons.pop()
				}
				// Complete at e.t; a fault explains it only if permits
				// held then, enough of them to leave room for the grant
				// at e.t, were on the server when it struck (last proven
				// before it: issue 30, rule 1), and e.t comes within a ttl
				// after it.
				var since int64
				if present != nil {
					since = present.lostSince(set, e.hold, e.t, held-limit)
				} else {
					since = lostSince(h, set, open, e.hold, e.t, held-limit) // weights not all positive: scan
				}
				c.reaches = append(c.reaches, Reach{Kind: KindOverCapacity, Key: id.String(), Since: since, First: e.t, Last: e.t, Horizon: horizon})
				if c.full(KindOverCapacity) {
					c.skipAt(KindOverCapacity, e.t)
					continue
				}
				active := make([]*hold, 0, len(open))
				for _, k := range slices.Sorted(slices.Values(open)) {
					active = append(active, &hs[k])
				}
				ops := holdOps(h, active...)
				if len(ops) > 2*int(limit)+4 {
					ops = ops[:2*int(limit)+4]
				}
				c.failAt(KindOverCapacity, id.String(), e.t, overCapacityMsg(h, hs, open, capOf, held, e.t, limit, caps), ops...)
			} else if held <= limit {
				over = false
			}
		}
		events = events[:0]
	}
	var cur lockID
	var curKid int32
	for n, k := range idx {
		hd := &hs[k]
		if n > 0 && hd.kid != curKid {
			flush(cur)
		}
		cur, curKid = hd.id, hd.kid
		if hd.end > hd.start {
			events = append(events, event{hd.start, hd.weight, k}, event{hd.end, -hd.weight, k})
		}
	}
	flush(cur)
	pointOverCapacity(h, set, c, drift, capOf) // uncertain acquisitions proven only at a proof: holds.go's pointHold
	r := c.result("semaphore", len(hs), fmt.Sprintf("%s on %s, never above capacity", Plural(len(hs), "permit window"), Plural(countIDs(hs), "semaphore")))
	r.Elapsed = time.Since(start)
	return r
}

// lostSince is, for permits over capacity at t because of the grant of hold
// grant (one of open), when the permits a loss must have erased were last
// known on the server: the grant needed at least excess of the other open
// permits' weight gone, so it is the earliest instant by which that much
// weight was last proven present (holdSet.presentBy); history.Never when the
// others cannot make up the excess (a grant larger than the capacity is no
// loss's doing). It scans the open permits: CheckSemaphore asks
// permitPresence instead (O(log n) a query), and this only when a permit's
// weight is not positive (n < 0), which the Fenwick tree cannot search.
func lostSince(h *history.History, set *holdSet, open []int32, grant int32, t, excess int64) int64 {
	type last struct{ at, w int64 }
	others := make([]last, 0, len(open))
	for _, k := range open {
		if k != grant {
			others = append(others, last{set.presentBy(h, &set.holds[k], t), set.holds[k].weight})
		}
	}
	slices.SortFunc(others, func(a, b last) int { return cmp.Compare(a.at, b.at) })
	var w int64
	for _, o := range others {
		if w += o.w; w >= excess {
			return o.at
		}
	}
	return history.Never
}

// permitCapacities returns the capacity each permit window is held to (by
// index in hs): Options.Capacity when positive, else the capacity its own
// acquisition recorded (0: none).
func permitCapacities(h *history.History, hs []hold, o Options) []int64 {
	caps := make([]int64, len(hs))
	for k := range hs {
		caps[k] = h.Ops[hs[k].acq].Capacity
		if o.Capacity > 0 {
			caps[k] = o.Capacity
		}
	}
	return caps
}

// capBound is the multiset of the positive capacities of a semaphore's open
// permit windows (few distinct values: one, unless capacities conflict).
type capBound struct{ n map[int64]int }

// add counts a window's capacity in (open) or out.
func (b *capBound) add(c int64, open bool) {
	if c <= 0 {
		return
	}
	if b.n == nil {
		b.n = map[int64]int{}
	}
	if open {
		b.n[c]++
	} else if b.n[c]--; b.n[c] <= 0 {
		delete(b.n, c)
	}
}

// min is the lowest capacity of the open windows, 0 when none records one.
func (b *capBound) min() int64 {
	var m int64
	for c := range b.n {
		if m == 0 || c < m {
			m = c
		}
	}
	return m
}

// overCapacityMsg describes held permits above limit at t: the capacity, and
// when the open windows recorded different ones, which permit holds the
// lowest and every capacity recorded (the conflict).
func overCapacityMsg(h *history.History, hs []hold, open []int32, capOf []int64, held, t, limit int64, caps capBound) string {
	by := int32(-1)
	for _, k := range open {
		if capOf[k] == limit && (by < 0 || k < by) {
			by = k
		}
	}
	if len(caps.n) < 2 || by < 0 {
		return fmt.Sprintf("%s held at %s, capacity %d", Plural(held, "permit"), fmtT(t), limit)
	}
	a := &h.Ops[hs[by].acq]
	who := fmt.Sprintf("proc %d's acquisition", a.Process)
	if a.Owner != "" {
		who += " of permit " + a.Owner
	}
	recorded := slices.Sorted(maps.Keys(caps.n))
	return fmt.Sprintf("%s held at %s, above capacity %d, which %s recorded at %s; the live permits recorded capacities %v (the capacity changed while permits were live: each permit is held to its own)",
		Plural(held, "permit"), fmtT(t), limit, who, fmtT(a.T), recorded)
}
