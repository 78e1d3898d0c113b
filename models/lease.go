package models

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// CheckLeaseProtocol checks the answers of an exclusive lease's operations
// (acquire, acquire_wait, renew, verify, release) against one lease state per
// lock (key, field) on the server: at any instant the lock is free or held by
// one owner, an owner's lease is one contiguous span from its grant until its
// release or expiry, and an owner token is granted once.
//
// From that model, for each owner:
//
//   - its certain span is the time the server certainly held its lease:
//     from its grant's return (for an info acquisition, from the return of
//     its first proof) to the later of the earliest moment it could have
//     ended (the first release's invocation, or the earliest expiry: the
//     latest certain extension + ttl − Drift; see below for an uncertain
//     renewal) and the invocation of its last
//     proof — an ok renew, an ok release that released, an ok verify
//     "true" — since a lease proven held at two instants was held in
//     between;
//   - its proofs and grants must each have an instant no other owner's
//     certain span covers (KindOwnerConflict): a renew, release or verify
//     answered for an owner while another owner certainly held the lock is
//     a zombie answer; so is a grant, and an info acquisition proven by a
//     later renew or release, overlapping another holder;
//   - a proof invoked after its lease certainly ended is KindAfterEnd: after
//     an ok release that released it (a second "released"), or after the
//     latest possible expiry (the latest possible extension + ttl + Drift);
//     an info renewal counts as having extended the lease by its completion
//     (the convention of the other checkers: an implementation fences an
//     uncertain command before it reports it), one that never completed at
//     any time;
//   - a definite "not held" answer (release not_owned or already_released,
//     verify "false", a renew that failed without an error) inside the
//     owner's own certain span is KindWronglyDenied.
//
// Read-write leases (acquire_read, acquire_write) are owners too, each with
// its own lease: the after-end and wrongly-denied rules apply to them; owner
// conflicts do not (readers share; rw-exclusion judges their grants). A
// read-write lease's renewal that failed with an error or is unknown loses
// the handle (prim's rule), so the owner's later denials are not checked,
// even when a later release finds the lease still there (a lost handle
// answers verify "false" without asking; its release still asks).
//
// Semaphore permits (sem_acquire, sem_acquire_wait) are owners too, each
// permit its own lease, judged as a read-write lease is: a released or
// expired permit that answers verify true, renew ok or "released" again is
// KindAfterEnd (a zombie answer: the permit's own scripts are owner-checked
// and never re-create a permit); a permit denied inside its own certain span
// is KindWronglyDenied; owner conflicts do not apply (permits share the
// semaphore; the semaphore checker judges the grants against the capacity).
// A permit whose renewal failed with an error or is unknown is surrendered
// (prim's rule), so its owner's later denials are not checked; a permit's
// renewal with ttl_ms 0 may have set no expiry (permitNoExpiry).
//
// With Options.UncertainRenewalReleases (an implementation that, after a
// renewal whose outcome is unknown, fences it and releases the lease
// owner-checked in the background, as prim does), such a renewal ends the
// owner's certain span (unless a later proof extends it: the clean-up had not
// run), since the history does not record that release and another owner
// may be granted the lock before the lease's own release or expiry; and the
// owner's denials from then on are not checked, unless a later proof shows
// the lease still held: the handle answers "not held" without asking the
// server (verify "false", a renew refused, a release "already_released" once
// the clean-up ran). A renew refused after the uncertain one is never
// checked, later proof or not: the reference has renewal return false while
// ownership is uncertain, without asking, whatever a verify (which asks)
// finds meanwhile (a CI run of fenced-lock/lose-replies FAILed prim for
// that). Without it, an uncertain renewal changes nothing.
//
// For Judge, an owner conflict is a fault's hazard only if the lease whose
// certain span it falls in, and a wrong denial only if the denied lease, was
// last proven on the server (granted, renewed ok, verified true) before the
// loss ended: a lease proven after it survived it, or was written after it
// (Reach.Since).
//
// Equal times are concurrent (history/FORMAT.md): an operation invoked at the
// instant a certain span starts (a grant's return) may have come before that
// grant. A release (or a renewal or verification of an owner whose release
// was invoked by then) at that instant is no conflict: release, then grant;
// nor is an owner's denial invoked at the instant its own grant returned. A
// grant at the instant another's span starts still is: one of the two
// leases was granted while the other held the lock.
//
// Releases, renewals and verifications are matched to owners by their owner
// field, else to the latest acquisition of the same (key, field, proc).
// O(n log n).
func CheckLeaseProtocol(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	drift := int64(o.Drift)
	c := newCollector(o)

	// Owners, in acquisition order; ops attached to each.
	type owner struct {
		id      lockID
		name    string // owner token, or "" when unknown
		acq     int    // index of the acquisition
		ops     []int  // renew, verify, release, in invocation order
		sStart  int64  // certain span [sStart, sEnd); sEnd <= sStart: none
		sEnd    int64
		hasSpan bool
		lostAt  int64 // from then on, denials are not checked (see the doc comment's last paragraphs)
		mayEnd  int64 // the earliest its lease may have ended (first release invocation, earliest expiry, uncertain renewal)
		proofT  int64 // invocation of the last proof, or -1
		mode    mode  // exclusive, read, write or permit
		// lastProof[i] is the invocation of the latest proof among ops[:i+1]
		// (-1: none), and ttlMs the longest ttl of the acquisition and
		// renewals: computed once, when a violation first needs them.
		lastProof []int64
		ttlMs     int64
		ttlKnown  bool
	}
	nAcq := 0
	leaseMode := func(f string) (mode, bool) {
		m, _ := acquireMode(f)
		return m, m == modeExclusive || m == modeRead || m == modeWrite || m == modePermit
	}
	for k := range h.Ops {
		if _, ok := leaseMode(h.Ops[k].F); ok && h.Ops[k].Type != history.Fail {
			nAcq++
		}
	}
	owners := make([]owner, 0, nAcq)
	byOwner := make(map[ownerKey]int, nAcq)
	byProc := map[procKey]int{}
	kids := lockIDs{}
	kidOf := kids.of
	nOps := 0
	for k := range h.Ops {
		op := &h.Ops[k]
		if m, ok := leaseMode(op.F); ok {
			if op.Type == history.Fail {
				continue
			}
			nOps++
			kid := kidOf(op)
			if op.Type != history.OK && op.Owner != "" {
				if prev, ok := byOwner[ownerKey{kid, op.Owner}]; ok && prev >= 0 && h.Ops[owners[prev].acq].Type != history.OK && owners[prev].mode == m {
					// Another uncertain attempt of an owner whose earlier
					// one is still unproven (a resend): the earliest may
					// be the one that took the lease, so it may expire
					// first; the owner keeps that acquisition.
					continue
				}
			}
			owners = append(owners, owner{id: idOf(op), name: op.Owner, acq: k, mode: m})
			n := len(owners) - 1
			if op.Owner != "" {
				byOwner[ownerKey{kid, op.Owner}] = n
			}
			if op.Type == history.OK {
				byProc[procKey{kid, op.Process}] = n
			} else {
				// Later ops of this process without an owner cannot be told
				// apart from the unknown acquisition's: match none.
				byProc[procKey{kid, op.Process}] = -1
			}
			continue
		}
		if op.F != history.FRelease && op.F != history.FRenew && op.F != history.FVerify {
			continue
		}
		kid := kidOf(op)
		j, ok := byProc[procKey{kid, op.Process}]
		if op.Owner != "" {
			j, ok = byOwner[ownerKey{kid, op.Owner}]
		}
		if !ok || j < 0 {
			continue
		}
		nOps++
		owners[j].ops = append(owners[j].ops, k)
	}

	proves := func(op *history.Operation) bool {
		if op.Type != history.OK {
			return false
		}
		switch op.F {
		case history.FRenew:
			return true
		case history.FRelease:
			return op.Value == "" || op.Value == history.ValueReleased
		case history.FVerify:
			return op.Value == history.ValueTrue
		}
		return false
	}
	denies := func(op *history.Operation) bool {
		switch op.F {
		case history.FRelease:
			return op.Type == history.OK && (op.Value == history.ValueNotOwned || op.Value == history.ValueAlreadyReleased)
		case history.FVerify:
			return op.Type == history.OK && op.Value == history.ValueFalse
		case history.FRenew:
			return op.Type == history.Fail && op.Err == ""
		}
		return false
	}
	ownerName := func(ow *owner) string {
		if ow.name != "" {
			return "owner " + ow.name
		}
		return fmt.Sprintf("proc %d's lease", h.Ops[ow.acq].Process)
	}

	// Pass 1, per owner: certain spans and the after-end rule.
	for n := range owners {
		ow := &owners[n]
		a := &h.Ops[ow.acq]
		ttl := ms(a.TTLMs)
		granted := a.Type == history.OK
		// lowExp/highExp: earliest and latest possible server-side expiry.
		lowExp, highExp := history.Never, history.Never
		if ttl > 0 {
			lowExp = addSat(a.T, ttl-drift)
			if granted {
				highExp = addSat(a.Return, ttl+drift)
			}
		}
		releasedBy := history.Never // return of the ok release that released it
		var releasedOp *history.Operation
		firstRelInv := history.Never
		lostAt, cutAt := history.Never, history.Never // see the doc comment's last paragraphs
		var firstProof, lastProof *history.Operation
		for _, k := range ow.ops {
			op := &h.Ops[k]
			if proves(op) {
				ended := min(releasedBy, highExp)
				if op.T > ended {
					if c.full(KindAfterEnd) {
						c.skip(KindAfterEnd, a, releasedOp, op)
					} else if releasedBy <= highExp {
						c.fail(KindAfterEnd, ow.id.String(), fmt.Sprintf("%s answered %s at %s after it was released at %s: released twice or a zombie answer",
							op.F, answer(op), fmtT(op.T), fmtT(releasedBy)), a, releasedOp, op)
					} else {
						c.fail(KindAfterEnd, ow.id.String(), fmt.Sprintf("%s answered %s at %s for %s, whose lease had expired by %s at the latest (ttl %dms, drift %v)",
							op.F, answer(op), fmtT(op.T), ownerName(ow), fmtT(highExp), a.TTLMs, o.Drift), a, op)
					}
				}
				if firstProof == nil {
					firstProof = op
				}
				lastProof = op
			}
			if op.F == history.FRelease && op.T < firstRelInv {
				firstRelInv = op.T
			}
			if op.F == history.FRelease && proves(op) && op.Return < releasedBy {
				releasedBy, releasedOp = op.Return, op
			}
			if op.F == history.FRenew && op.Type == history.Info && o.UncertainRenewalReleases {
				lostAt, cutAt = min(lostAt, op.T), min(cutAt, op.T)
			}
			if op.F == history.FRenew && ow.mode != modeExclusive && (op.Type == history.Info || op.Type == history.Fail && op.Err != "") {
				lostAt = min(lostAt, op.T) // a read-write lease's failed renewal loses the handle
			}
			if op.F == history.FRenew {
				rttl := ms(op.TTLMs)
				if rttl <= 0 {
					rttl = ttl
				}
				switch {
				case rttl <= 0:
				case op.Type == history.OK:
					lowExp = max(lowExp, addSat(op.T, rttl-drift))
					if highExp != history.Never {
						highExp = max(highExp, addSat(op.Return, rttl+drift))
					}
					if !granted {
						granted = true // proven: the latest expiry is now known
						highExp = addSat(op.Return, rttl+drift)
					}
				case op.Type == history.Info && op.Done && highExp != history.Never:
					highExp = max(highExp, addSat(op.Return, rttl+drift))
				case op.Type == history.Info:
					highExp = history.Never
				}
			}
			if permitNoExpiry(ow.mode, op) {
				highExp = history.Never
			}
		}
		if a.Type == history.OK {
			ow.sStart = a.Return
		} else if firstProof != nil {
			ow.sStart = firstProof.Return
		} else {
			continue // an unknown acquisition never proven: no certain span
		}
		ow.lostAt, ow.proofT = lostAt, -1
		if lastProof != nil {
			ow.proofT = lastProof.T
		}
		ow.sEnd = min(firstRelInv, lowExp, cutAt)
		ow.mayEnd = ow.sEnd
		if lastProof != nil && lastProof.T > ow.sEnd {
			ow.sEnd = lastProof.T
		}
		ow.hasSpan = ow.sEnd > ow.sStart
	}

	// Pass 2, per lock: every grant and proof needs an instant outside the
	// others' certain spans; every denial an instant outside its own.
	byID := map[int32][]int{}
	for n := range owners {
		kid := kids[owners[n].id]
		byID[kid] = append(byID[kid], n)
	}
	kidList := make([]int32, 0, len(byID))
	for kid := range byID {
		kidList = append(kidList, kid)
	}
	slices.Sort(kidList)
	for _, kid := range kidList {
		list := byID[kid]
		// Spans sorted by start, with the two furthest ends (of different
		// owners) among each prefix.
		// Owner conflicts are an exclusive lease's: read-write leases share
		// (rw-exclusion judges their grants).
		spans := make([]int, 0, len(list))
		for _, n := range list {
			if owners[n].hasSpan && owners[n].mode == modeExclusive {
				spans = append(spans, n)
			}
		}
		slices.SortFunc(spans, func(x, y int) int { return cmp.Compare(owners[x].sStart, owners[y].sStart) })
		type top2 struct{ a, b int } // owner indices, -1 if none; end(a) >= end(b)
		tops := make([]top2, len(spans))
		cur := top2{-1, -1}
		for i, n := range spans {
			e := owners[n].sEnd
			switch {
			case cur.a < 0 || e > owners[cur.a].sEnd:
				cur = top2{n, cur.a}
			case cur.b < 0 || e > owners[cur.b].sEnd:
				cur.b = n
			}
			tops[i] = cur
		}
		// coveredBy returns another owner whose certain span covers every
		// instant of [from, to], or -1. Equal times are concurrent
		// (history/FORMAT.md): an operation of self at the instant another's
		// span starts (the grant's return) may come before that grant, and
		// is no conflict when self's lease may end at that instant too (its
		// release was invoked by then: release, then grant); a grant at that
		// instant still is (two leases at once, whichever came first).
		coveredBy := func(self int, from, to int64) int {
			edge := owners[self].mayEnd <= from
			i := sort.Search(len(spans), func(i int) bool {
				s := owners[spans[i]].sStart
				return s > from || edge && s == from
			}) - 1
			if i < 0 {
				return -1
			}
			t := tops[i]
			cand := t.a
			if cand == self {
				cand = t.b
			}
			if cand >= 0 && owners[cand].sEnd > to {
				return cand
			}
			return -1
		}
		// reach records where a violation lies, for Judge: the lease state a
		// fault could have lost was last known on the server at since (the
		// latest proof of presence of the lease whose loss the violation
		// needs, by the violation: presentBy), the violating operation
		// spans op, and a lost lease explains what starts within its TTL (+
		// drift) of the loss.
		reach := func(kind, key string, since int64, op *history.Operation, ttlMs int64) {
			ln, horizon := history.Never, history.Never
			if op.Return != history.Never {
				ln = op.Return - op.T
			}
			if ttlMs > 0 {
				horizon = addSat(ms(ttlMs), int64(o.Drift))
			}
			c.reaches = append(c.reaches, Reach{Kind: kind, Key: key, Since: min(since, op.T), First: op.T, Last: op.T, Len: ln, Horizon: horizon})
		}
		// presentBy is the latest instant no later than t at which ow's
		// lease is known to have been on the server: the invocation of
		// its latest proof invoked by t, else of its acquisition (issue
		// 30, rule 1: a fault explains a violation that needs a lease
		// gone only if it struck after this).
		// O(log n) per violation, on any history: the latest proof by each
		// of the owner's operations is computed once (ow.lastProof), not
		// walked back to for every violation.
		presentBy := func(ow *owner, t int64) int64 {
			if ow.lastProof == nil {
				ow.lastProof = make([]int64, len(ow.ops))
				last := int64(-1)
				for i, k := range ow.ops {
					if op := &h.Ops[k]; proves(op) {
						last = op.T
					}
					ow.lastProof[i] = last
				}
			}
			at := h.Ops[ow.acq].T
			i := sort.Search(len(ow.ops), func(i int) bool { return h.Ops[ow.ops[i]].T > t })
			if i > 0 && ow.lastProof[i-1] >= 0 {
				return max(at, ow.lastProof[i-1])
			}
			return at
		}
		// ttlOf is the longest ttl of an owner's acquisition and renewals
		// (computed once per owner).
		ttlOf := func(ow *owner) int64 {
			if !ow.ttlKnown {
				ow.ttlMs, ow.ttlKnown = h.Ops[ow.acq].TTLMs, true
				for _, k := range ow.ops {
					if op := &h.Ops[k]; op.F == history.FRenew {
						ow.ttlMs = max(ow.ttlMs, op.TTLMs)
					}
				}
			}
			return ow.ttlMs
		}
		for _, n := range list {
			ow := &owners[n]
			a := &h.Ops[ow.acq]
			// check: a grant (op is the acquisition) or a proof needs an
			// instant in [from, to] outside the others' certain spans.
			check := func(op *history.Operation, from, to int64) {
				if from > to || ow.mode != modeExclusive {
					return
				}
				other := coveredBy(n, from, to)
				if other < 0 {
					return
				}
				ot := &owners[other]
				oa := &h.Ops[ot.acq]
				// The lease a fault must have erased is ot's, whose
				// presence forbids op.
				reach(KindOwnerConflict, ow.id.String(), presentBy(ot, from), op, max(ttlOf(ot), ttlOf(ow)))
				if c.full(KindOwnerConflict) {
					c.skip(KindOwnerConflict, oa, a, op)
					return
				}
				what := "grant"
				if op != a {
					what = fmt.Sprintf("%s answered %s", op.F, answer(op))
				}
				c.fail(KindOwnerConflict, ow.id.String(), fmt.Sprintf("%s of %s in [%s, %s] while %s certainly held the lock [%s, %s)",
					what, ownerName(ow), fmtT(from), fmtT(to), ownerName(ot), fmtT(ot.sStart), fmtT(ot.sEnd)), oa, a, op)
			}
			if a.Type == history.OK {
				check(a, a.T, a.Return)
			}
			for _, k := range ow.ops {
				op := &h.Ops[k]
				switch {
				case proves(op):
					check(op, max(op.T, a.T), op.Return)
				case denies(op) && ow.hasSpan && ow.sStart < op.T && op.Return < ow.sEnd && (op.T < ow.lostAt || ow.mode == modeExclusive && op.Return < ow.proofT && op.F != history.FRenew):
					reach(KindWronglyDenied, ow.id.String(), presentBy(ow, op.T), op, ttlOf(ow))
					if c.full(KindWronglyDenied) {
						c.skip(KindWronglyDenied, a, op)
						continue
					}
					c.fail(KindWronglyDenied, ow.id.String(), fmt.Sprintf("%s answered %s in [%s, %s], inside %s's own certain span [%s, %s)",
						op.F, answer(op), fmtT(op.T), fmtT(op.Return), ownerName(ow), fmtT(ow.sStart), fmtT(ow.sEnd)), a, op)
				}
			}
		}
	}
	r := c.result("lease-protocol", nOps, fmt.Sprintf("%s of %s on %s, consistent with one lease state per lock",
		Plural(nOps, "lease operation"), Plural(len(owners), "owner"), Plural(len(kids), "lock")))
	r.Elapsed = time.Since(start)
	return r
}

// permitNoExpiry reports whether op is a permit's renewal that may have set
// no expiry (ttl_ms 0, answered ok or unknown: prim renews a permit to
// NoExpiry): its latest expiry is unknown from then on, so no later proof is
// after its end by expiry. (A lock's renewal without ttl_ms keeps the
// acquisition's.)
func permitNoExpiry(m mode, op *history.Operation) bool {
	return m == modePermit && op.F == history.FRenew && op.TTLMs == 0 && op.Type != history.Fail
}

// answer names an operation's result for messages.
func answer(op *history.Operation) string {
	switch {
	case op.Type != history.OK:
		return op.Type.String()
	case op.Value != "":
		return fmt.Sprintf("%q", op.Value)
	}
	return "ok"
}
