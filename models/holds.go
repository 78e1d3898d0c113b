package models

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/coordtorture/coordtorture/history"
)

// mode is what an acquisition acquires.
type mode uint8

const (
	modeNone mode = iota
	modeExclusive
	modeRead
	modeWrite
	modePermit
)

func acquireMode(f string) (m mode, waits bool) {
	switch f {
	case history.FAcquire:
		return modeExclusive, false
	case history.FAcquireWait:
		return modeExclusive, true
	case history.FAcquireRead:
		return modeRead, false
	case history.FAcquireReadWait:
		return modeRead, true
	case history.FAcquireWrite:
		return modeWrite, false
	case history.FAcquireWriteWait:
		return modeWrite, true
	case history.FSemAcquire:
		return modePermit, false
	case history.FSemAcquireWait:
		return modePermit, true
	}
	return modeNone, false
}

// hold is one validity window of one holder, and what the server did with
// the lease (for liveness and leaks).
type hold struct {
	id     lockID
	kid    int32 // dense number of id, for fast sorting and maps
	mode   mode
	start  int64 // the acquisition (or late renewal) returned
	end    int64 // min(release invoke, valid − drift); ≥ start (an uncertain renewal's invocation counts as a release's)
	valid  int64 // invoke time + ttl, extended by renewals; Never without ttl
	relInv int64 // invocation of the first release, or Never
	weight int64
	acq    int   // index in History.Ops of the acquisition
	rel    int   // index of the release (or uncertain renewal) that ended the window, or -1
	ttl    int64 // ns, 0 for none
	maxTTL int64 // the longest ttl of the acquisition and its ok renewals (ns)

	// Server side, for liveness: the lease is certainly gone by freedAt,
	// which is the return of an ok release that released it, else the latest
	// possible expiry (Never when unknown or no ttl).
	freedAt   int64
	freedFrom int64 // earliest instant it may have gone (release invoke)
	expiry    int64 // latest possible server-side expiry, Never if unknown
	released  bool  // freed by an ok release
	// cut: the window was ended by an uncertain renewal (relInv is its
	// invocation), not a release.
	cut bool
	// superseded: a late renewal continued this lease in a later hold, which
	// carries its server side.
	superseded bool
}

// holdSet is every validity window of a history, in the order the holders
// acquired (invocation order).
type holdSet struct {
	holds []hold
	// maybe are acquisitions with unknown outcome (info, or never
	// completed): they may hold the lock from their invocation on. For the
	// server-side questions (liveness, leaks) an info operation is taken to
	// have had its effect, if any, by its completion record (prim fences an
	// uncertain command before it reports the outcome); one that never
	// completed may have it at any time. One whose owner later proves the
	// lease held is a hold as well (buildHolds).
	maybe []maybeHold
	// proofs are the proofs of presence of every lease, as (its
	// acquisition's index in History.Ops, the proof's invocation), in
	// history order until presentBy first needs them ordered by lease: an
	// ok renewal, a verify answered true, a release answered "released".
	// No script of theirs creates an entry, so the lease was on the server
	// at an instant of each.
	proofs []proof
	sorted bool
	// points are the promoted holds (uncertain acquisitions proven later)
	// whose window is empty: proven only at an instant of their proof.
	points []pointHold
}

// pointHold is a hold known on the server only at some instant of
// [from, to]: an uncertain acquisition whose first proof (its op, an index
// in History.Ops) left it no window — a release answered "released" (the
// window would start at the proof's return and end at its invocation), or a
// verify or renewal answered after the acquisition's validity had run out.
//
// Why only the proof's interval. The acquisition may have taken effect at
// any instant up to the proof (history/FORMAT.md's info): a recorded
// completion bounds it for prim, which fences an uncertain command before
// it reports the outcome, but not for a peer implementation whose lost
// command may still land later, and the release ends the lease no later
// than the proof. So the one instant the lease is known held lies in
// [from, to], and which one is unknown: the checkers (pointConflicts,
// pointOverCapacity) FAIL it only when other holds certainly fill the lock
// at every instant of [from, to] — each of them covering the whole
// interval, strictly (equal times are concurrent: a window starting at from
// or ending at to may have been granted after, or released before, the
// proof). Holds that fill the capacity only together, each over part of
// the interval, are not counted: sound, not complete.
type pointHold struct {
	hold     int32
	op       int
	from, to int64
}

type proof struct {
	acq int
	t   int64
}

// presentBy is the latest instant no later than t at which hd's lease is
// known to have been on the server: the invocation of its latest proof of
// presence invoked by t, else its acquisition's invocation (the earliest it
// may have been made). A fault's loss explains a violation that needs the
// lease gone only if it struck after this (issue 30, rule 1: a lease proven
// after the loss survived it, or was written after it).
func (hs *holdSet) presentBy(h *history.History, hd *hold, t int64) int64 {
	if !hs.sorted {
		// Stable: each lease's proofs stay in invocation order.
		slices.SortStableFunc(hs.proofs, func(a, b proof) int { return cmp.Compare(a.acq, b.acq) })
		hs.sorted = true
	}
	ps := hs.proofs
	n := sort.Search(len(ps), func(n int) bool { return ps[n].acq > hd.acq || ps[n].acq == hd.acq && ps[n].t > t })
	if n > 0 && ps[n-1].acq == hd.acq {
		return max(ps[n-1].t, h.Ops[hd.acq].T)
	}
	return h.Ops[hd.acq].T
}

type maybeHold struct {
	id     lockID
	mode   mode
	op     int   // index in History.Ops
	from   int64 // invocation
	expiry int64 // latest possible expiry; Never if unknown
}

type ownerKey struct {
	kid   int32
	owner string
}

type procKey struct {
	kid  int32
	proc int
}

// buildHolds derives the validity windows of every ok acquisition (of the
// given modes), matching releases and renewals to holders by (key, owner)
// when the release carries an owner, else by (key, process). cutUncertain
// ends a window at an uncertain renewal (Options.UncertainRenewalReleases).
//
// An acquisition of unknown outcome (info) whose owner later proves the lease
// held (an ok renewal, a verify answered true, a release answered
// "released", matched by owner) did take it: it is a hold too (issue 30,
// rule 5), certain from that proof's return (the acquisition may have taken
// effect as late as the proof: history/FORMAT.md's info), valid until its
// invocation + ttl or the proof's renewal, and renewed and released from
// then on like any other. Several unproven ones of one owner (a resend) are
// one hold: valid until the earliest invocation + ttl among them (whichever
// took the lease, it may have been the first), gone on the server by the
// latest expiry any of them may have set.
func buildHolds(h *history.History, drift int64, want func(mode) bool, cutUncertain bool) *holdSet {
	n := 0
	for k := range h.Ops {
		if m, _ := acquireMode(h.Ops[k].F); m != modeNone && h.Ops[k].Type == history.OK && want(m) {
			n++
		}
	}
	hs := &holdSet{holds: make([]hold, 0, n)}
	byOwner := make(map[ownerKey]int)
	// pending are the info acquisitions with an owner not yet proven, by
	// owner: the earliest one's index in h.Ops, and the latest server-side
	// expiry any of them may have set (Never: unknown). Several may share an
	// owner (a resend, a client id used as owner): any of them may be the
	// one that took the lease, so the promoted hold's validity runs from the
	// earliest invocation (it may have expired that early: the window, which
	// a later grant must not overlap, ends soonest) and its server side may
	// last until the latest expiry (liveness and leaks must not count it
	// gone sooner).
	type pendingAcq struct {
		first  int
		valid  int64 // the earliest invocation + ttl (Never: no ttl)
		maxTTL int64
		expiry int64
	}
	pending := make(map[ownerKey]pendingAcq)
	byProc := make(map[procKey]int)
	kids := lockIDs{}
	kidOf := kids.of
	lookup := func(o *history.Operation) (int, bool) {
		kid := kidOf(o)
		if o.Owner != "" {
			if k, ok := byOwner[ownerKey{kid, o.Owner}]; ok {
				return k, true
			}
		}
		k, ok := byProc[procKey{kid, o.Process}]
		return k, ok
	}
	register := func(k int, o *history.Operation) {
		kid := hs.holds[k].kid
		if o.Owner != "" {
			byOwner[ownerKey{kid, o.Owner}] = k
		}
		byProc[procKey{kid, o.Process}] = k
	}
	forget := func(k int) {
		hd := &hs.holds[k]
		a := &h.Ops[hd.acq]
		if a.Owner != "" {
			delete(byOwner, ownerKey{hd.kid, a.Owner})
		}
		if byProc[procKey{hd.kid, a.Process}] == k {
			delete(byProc, procKey{hd.kid, a.Process})
		}
	}
	// cut ends a window at a renewal that did not succeed, for an
	// implementation that then surrenders the lease and releases it
	// (Options.UncertainRenewalReleases: prim after an uncertain renewal, and
	// a semaphore permit after any failed one): the holder stops counting on
	// it, and its unrecorded clean-up may free it, so the window ends here, as
	// at a release's invocation. Not at the renewal's return, though the
	// holder may use the lease until then: prim learns the outcome is
	// uncertain (or fails) inside the call and may fence and release at once,
	// before Renew returns (a semaphore permit is released before it returns
	// by design), so another holder can be granted before that return; a
	// window ending later would call a correct implementation's grant an
	// overlap. Between the invocation and the return the holder's use is
	// therefore not checked against later grants: the price of not knowing
	// when the unrecorded clean-up ran.
	cut := func(hd *hold, o *history.Operation, k int) {
		if cutUncertain && o.T < hd.relInv {
			hd.relInv, hd.rel, hd.cut = o.T, k, true
		}
	}
	var proofOf [][2]int // promoted holds: (index in hs.holds, their first proof's in h.Ops)
	for k := range h.Ops {
		o := &h.Ops[k]
		if m, _ := acquireMode(o.F); m != modeNone {
			if !want(m) {
				continue
			}
			ttl := ms(o.TTLMs)
			switch o.Type {
			case history.OK:
				hd := hold{id: idOf(o), kid: kidOf(o), mode: m, start: o.Return, valid: history.Never, relInv: history.Never,
					weight: o.Weight(), acq: k, rel: -1, ttl: ttl, maxTTL: ttl, expiry: history.Never}
				if ttl > 0 {
					hd.valid = addSat(o.T, ttl)
					hd.expiry = addSat(o.Return, ttl)
				}
				hs.holds = append(hs.holds, hd)
				register(len(hs.holds)-1, o)
				if o.Owner != "" {
					delete(pending, ownerKey{hd.kid, o.Owner})
				}
			case history.Info:
				mh := maybeHold{id: idOf(o), mode: m, op: k, from: o.T, expiry: history.Never}
				if ttl > 0 && o.Done {
					mh.expiry = addSat(o.Return, ttl)
				}
				hs.maybe = append(hs.maybe, mh)
				if o.Owner != "" {
					who := ownerKey{kidOf(o), o.Owner}
					valid := history.Never
					if ttl > 0 {
						valid = addSat(o.T, ttl)
					}
					if p, ok := pending[who]; ok {
						if p.expiry != history.Never {
							p.expiry = max(p.expiry, mh.expiry)
						}
						p.valid, p.maxTTL = min(p.valid, valid), max(p.maxTTL, ttl)
						pending[who] = p
					} else {
						pending[who] = pendingAcq{first: k, valid: valid, maxTTL: ttl, expiry: mh.expiry}
					}
				}
			}
			continue
		}
		// promoted is the hold an info acquisition became at o, its first
		// proof (-1: none).
		promoted := -1
		if isProof(o) && o.Owner != "" {
			who := ownerKey{kidOf(o), o.Owner}
			if _, held := byOwner[who]; !held {
				if p, waiting := pending[who]; waiting {
					delete(pending, who)
					a := p.first
					ao := &h.Ops[a]
					m, _ := acquireMode(ao.F)
					ttl := ms(ao.TTLMs)
					hd := hold{id: idOf(ao), kid: who.kid, mode: m, start: o.Return, valid: history.Never, relInv: history.Never,
						weight: ao.Weight(), acq: a, rel: -1, ttl: ttl, maxTTL: p.maxTTL, expiry: history.Never}
					if p.valid != history.Never {
						hd.valid, hd.expiry = p.valid, p.expiry
					}
					hs.holds = append(hs.holds, hd)
					promoted = len(hs.holds) - 1
					register(promoted, ao)
					proofOf = append(proofOf, [2]int{promoted, k})
				}
			}
		}
		switch o.F {
		case history.FRelease:
			j, ok := lookup(o)
			if !ok {
				continue
			}
			hd := &hs.holds[j]
			if o.T < hd.relInv {
				hd.relInv = o.T
				hd.rel = k
			}
			if isProof(o) {
				hs.proofs = append(hs.proofs, proof{hd.acq, o.T})
				hd.released = true
				hd.freedAt = o.Return
				hd.freedFrom = o.T
			}
			forget(j)
		case history.FRenew:
			j, ok := lookup(o)
			if !ok {
				continue
			}
			hd := &hs.holds[j]
			ttl := ms(o.TTLMs)
			if ttl <= 0 {
				ttl = hd.ttl
			}
			switch o.Type {
			case history.OK:
				hs.proofs = append(hs.proofs, proof{hd.acq, o.T})
				hd.maxTTL = max(hd.maxTTL, ttl)
				if ttl > 0 && hd.expiry != history.Never {
					hd.expiry = max(hd.expiry, addSat(o.Return, ttl))
				}
				newValid := history.Never
				if ttl > 0 {
					newValid = addSat(o.T, ttl)
				}
				if o.T <= hd.valid-drift || hd.valid == history.Never || j == promoted {
					hd.valid = max(hd.valid, newValid)
					continue
				}
				// The holder's window had closed before it renewed: the
				// successful renewal opens a new one.
				nh := *hd
				nh.start, nh.valid, nh.rel = o.Return, newValid, -1
				if nh.cut {
					nh.relInv, nh.cut = history.Never, false // the renewal proves the clean-up had not run
				}
				hd.superseded = true
				hs.holds = append(hs.holds, nh)
				register(len(hs.holds)-1, &h.Ops[nh.acq])
			case history.Fail:
				if hd.mode == modePermit {
					cut(hd, o, k) // a semaphore's failed renewal surrenders the permit
				}
			case history.Info:
				cut(hd, o, k)
				// It may have extended the lease, by its return at the
				// latest (see maybeHold).
				if ttl > 0 && o.Done && hd.expiry != history.Never {
					hd.expiry = max(hd.expiry, addSat(o.Return, ttl))
				} else {
					hd.expiry = history.Never
				}
			}
		case history.FVerify:
			if j, ok := lookup(o); ok && isProof(o) {
				hs.proofs = append(hs.proofs, proof{hs.holds[j].acq, o.T})
			}
		}
	}
	for k := range hs.holds {
		hd := &hs.holds[k]
		end := hd.valid
		if end != history.Never {
			end -= drift
		}
		hd.end = min(end, hd.relInv)
		if hd.end < hd.start {
			hd.end = hd.start
		}
		if !hd.released {
			// Gone by its latest expiry (+ drift), possibly as early as
			// its earliest one (invoke time + ttl).
			hd.freedAt, hd.freedFrom = history.Never, history.Never
			if hd.expiry != history.Never {
				hd.freedAt = addSat(hd.expiry, drift)
				hd.freedFrom = hd.valid
			}
		}
	}
	for _, p := range proofOf {
		if hd, o := &hs.holds[p[0]], &h.Ops[p[1]]; hd.end <= hd.start {
			hs.points = append(hs.points, pointHold{hold: int32(p[0]), op: p[1], from: o.T, to: o.Return})
		}
	}
	return hs
}

// coverers returns, for each point hold (aligned with hs.points), the
// other non-empty windows of its lock that certainly held at every instant
// of [from, to] (strictly: see pointHold) and whose mode conflicts with the
// point's (conflicts nil: any). One sweep per lock over windows by start
// and points by from, keeping the windows still open: O(n log n) plus the
// open windows at each point.
func (hs *holdSet) coverers(conflicts func(a, b mode) bool) [][]int32 {
	out := make([][]int32, len(hs.points))
	if len(hs.points) == 0 {
		return out
	}
	pts := make([]int, len(hs.points))
	for n := range pts {
		pts[n] = n
	}
	kidOf := func(n int) int32 { return hs.holds[hs.points[n].hold].kid }
	slices.SortFunc(pts, func(a, b int) int {
		if c := cmp.Compare(kidOf(a), kidOf(b)); c != 0 {
			return c
		}
		return cmp.Compare(hs.points[a].from, hs.points[b].from)
	})
	idx := sortedByID(hs.holds)
	var open []int32
	i := 0
	cur := int32(-1)
	for _, n := range pts {
		p := hs.points[n]
		ph := &hs.holds[p.hold]
		if ph.kid != cur {
			cur, open = ph.kid, open[:0]
			for i < len(idx) && hs.holds[idx[i]].kid < cur {
				i++
			}
		}
		for ; i < len(idx) && hs.holds[idx[i]].kid == cur && hs.holds[idx[i]].start < p.from; i++ {
			if q := &hs.holds[idx[i]]; q.end > q.start {
				open = append(open, idx[i])
			}
		}
		open = slices.DeleteFunc(open, func(k int32) bool { return hs.holds[k].end <= p.from })
		for _, k := range open {
			if q := &hs.holds[k]; k != p.hold && q.end > p.to && (conflicts == nil || conflicts(q.mode, ph.mode)) {
				out[n] = append(out[n], k)
			}
		}
	}
	return out
}

// pointConflicts reports every point hold (an uncertain acquisition proven
// only at an instant of its proof: pointHold) that a conflicting window
// covers across its whole proof: the lease was on the server at an instant
// another holder certainly held the lock (KindOverlap). A fault explains it
// only if it erased the other lease after its latest proof of presence by
// the proof's return (Reach.Since: presentBy) — the point's own lease was
// on the server at the proof, so it was not the one lost.
func pointConflicts(h *history.History, set *holdSet, c *collector, drift int64, conflicts func(a, b mode) bool) {
	covs := set.coverers(conflicts)
	for n, p := range set.points {
		cov := covs[n]
		if len(cov) == 0 {
			continue
		}
		ph, q := &set.holds[p.hold], &set.holds[cov[0]]
		key := ph.id.String()
		c.reaches = append(c.reaches, Reach{Kind: KindOverlap, Key: key, Since: set.presentBy(h, q, p.to),
			First: p.from, Last: p.to, Horizon: horizonOf(q.maxTTL, drift)})
		if c.full(KindOverlap) {
			c.skipAt(KindOverlap, p.from)
			continue
		}
		a, o := &h.Ops[ph.acq], &h.Ops[p.op]
		c.failAt(KindOverlap, key, p.from, fmt.Sprintf("proc %d's acquisition of unknown outcome (invoked at %s) was proven on the server by %s answered %s in [%s, %s], while proc %d held it throughout [%s, %s)",
			a.Process, fmtT(a.T), o.F, answer(o), fmtT(p.from), fmtT(p.to), h.Ops[q.acq].Process, fmtT(q.start), fmtT(q.end)),
			append(holdOps(h, q), a, o)...)
	}
}

// pointOverCapacity reports every point hold of a semaphore (pointHold)
// whose weight, with that of the permits whose windows each cover its whole
// proof, exceeds the lowest capacity any of them is held to (capOf, by hold
// index): KindOverCapacity, with the reach of lostSince.
func pointOverCapacity(h *history.History, set *holdSet, c *collector, drift int64, capOf []int64) {
	covs := set.coverers(nil)
	for n, p := range set.points {
		cov := covs[n]
		if len(cov) == 0 {
			continue
		}
		ph := &set.holds[p.hold]
		held, limit, horizon := ph.weight, capOf[p.hold], int64(0)
		for _, k := range cov {
			held += set.holds[k].weight
			if cp := capOf[k]; cp > 0 && (limit <= 0 || cp < limit) {
				limit = cp
			}
			horizon = max(horizon, horizonOf(set.holds[k].maxTTL, drift))
		}
		if limit <= 0 || held <= limit {
			continue
		}
		key := ph.id.String()
		open := append(slices.Clone(cov), p.hold)
		c.reaches = append(c.reaches, Reach{Kind: KindOverCapacity, Key: key, Since: lostSince(h, set, open, p.hold, p.to, held-limit),
			First: p.from, Last: p.to, Horizon: horizon})
		if c.full(KindOverCapacity) {
			c.skipAt(KindOverCapacity, p.from)
			continue
		}
		active := make([]*hold, 0, len(cov))
		for _, k := range cov {
			active = append(active, &set.holds[k])
		}
		a, o := &h.Ops[ph.acq], &h.Ops[p.op]
		c.failAt(KindOverCapacity, key, p.from, fmt.Sprintf("%s held at an instant of [%s, %s], capacity %d: proc %d's acquisition of unknown outcome (invoked at %s) was proven on the server by %s answered %s then, while %s held throughout",
			Plural(held, "permit"), fmtT(p.from), fmtT(p.to), limit, a.Process, fmtT(a.T), o.F, answer(o), Plural(int64(len(cov)), "other permit")),
			append(holdOps(h, active...), a, o)...)
	}
}

// isProof reports whether o proves its owner's lease on the server at an
// instant between its invocation and its return: an ok renewal, a verify
// answered true, a release answered "released" (or without a value). None of
// their scripts creates an entry.
func isProof(o *history.Operation) bool {
	if o.Type != history.OK {
		return false
	}
	switch o.F {
	case history.FRenew:
		return true
	case history.FVerify:
		return o.Value == history.ValueTrue
	case history.FRelease:
		return o.Value == "" || o.Value == history.ValueReleased
	}
	return false
}
