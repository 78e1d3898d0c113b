package models

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// CheckFencedResource is the fenced-resource oracle. For each resource (the
// key of write operations) it replays the writes — each carrying the token
// its writer held — in the order the resource applied them, and reports
//
//   - every stale write accepted: an ok write whose token is below a token
//     the resource had already accepted (or is not positive),
//   - every correct write wrongly rejected: a fail write whose token is
//     positive and at least every token accepted before it, and
//   - every token reused by a different owner: two accepted writes with the
//     same token whose writers name different owners (the write's owner
//     field, when the history records it). One lease may write repeatedly
//     with its token; a second owner with the same token means the counter
//     regressed (failover, restore, eviction) and the resource, which accepts
//     equal tokens, took a stale write it cannot tell apart.
//   - every write with a token its process never received (rule 11): in a
//     history whose writes carry no owner, each write acted for its own
//     process's answered acquisition of its token (writers); a write whose
//     process no answered acquisition had given that token by its
//     invocation (another process's token, one nobody was given, one given
//     only later) is token-not-given (never a hazard), whatever the
//     resource answered. A
//     history of the resource alone (no answered token-granting
//     acquisition) attributes nothing.
//
// Equal tokens from one owner are fine. The apply order is the
// seq field when every ok and fail write of the resource has one (the
// resource numbers its decisions). Otherwise it is real time: a write is
// after another only if it was invoked after the other completed, and only
// what holds in every order consistent with that is reported — a stale write
// accepted after an ok write with a larger token had completed, a write
// rejected when no larger token could have been applied before it. Info
// writes may or may not have been applied: they never make an acceptance
// stale, and they can justify a rejection.
func CheckFencedResource(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	byKey := make(map[string][]int)
	var keys []string
	n := 0
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F != history.FWrite {
			continue
		}
		if _, ok := byKey[op.Key]; !ok {
			keys = append(keys, op.Key)
		}
		byKey[op.Key] = append(byKey[op.Key], k)
		n++
	}
	slices.Sort(keys)
	seqKeys := 0
	ws := newWriters(h)
	for _, key := range keys {
		idx := byKey[key]
		reusedTokens(h, key, idx, c, ws)
		if allSeq(h, idx) {
			seqKeys++
			seqMatchesRealTime(h, key, idx, c)
			fencedBySeq(h, key, idx, c)
		} else {
			fencedRealTime(h, key, idx, c)
		}
	}
	order := "real-time order"
	if seqKeys == len(keys) && len(keys) > 0 {
		order = "seq order"
	} else if seqKeys > 0 {
		order = fmt.Sprintf("seq order on %d, real-time order on %d", seqKeys, len(keys)-seqKeys)
	}
	r := c.result("fenced-resource", n, fmt.Sprintf("%s to %s (%s): no stale write accepted, no current write rejected, no token reused by another owner", Plural(n, "write"), Plural(len(keys), "resource"), order))
	r.Elapsed = time.Since(start)
	return r
}

// writers attributes each write to the lease it acted for. A write with
// an owner field acted for that owner. A write without one (a history that
// records no owner on its writes) acted for its own process's answered
// acquisition of the write's token: the latest ok token-granting
// acquisition of the same process that returned by the write's invocation
// and granted that token (an acquisition without an owner is named by its
// record number, "#I"). A process can only write with a token it was given:
// when the history records answered token-granting acquisitions, an
// ownerless write whose process was given no such token by then (another
// process's token, a token nobody was given, a token it was given only
// later) is token-not-given (rule 11, see CheckFencedResource).
type writers struct {
	h       *history.History
	indexed bool // built on the first write without an owner
	// byProc: each process's answered grants, per token, by return.
	byProc map[int]map[int64][]tokenGrant
	// byToken: every answered grant of each token, by return.
	byToken map[int64][]tokenGrant
	any     bool // the history has answered token-granting acquisitions
}

// tokenGrant is an answered token-granting acquisition.
type tokenGrant struct {
	ret   int64
	owner string
	op    *history.Operation
}

func newWriters(h *history.History) *writers { return &writers{h: h} }

func (w *writers) index() {
	h := w.h
	w.indexed, w.byProc, w.byToken = true, map[int]map[int64][]tokenGrant{}, map[int64][]tokenGrant{}
	for k := range h.Ops {
		op := &h.Ops[k]
		if !isTokenAcquire(op.F) || op.Type != history.OK || op.Token <= 0 {
			continue
		}
		w.any = true
		owner := op.Owner
		if owner == "" {
			owner = fmt.Sprintf("#%d", op.I)
		}
		g := tokenGrant{op.Return, owner, op}
		if w.byProc[op.Process] == nil {
			w.byProc[op.Process] = map[int64][]tokenGrant{}
		}
		w.byProc[op.Process][op.Token] = append(w.byProc[op.Process][op.Token], g)
		w.byToken[op.Token] = append(w.byToken[op.Token], g)
	}
	byRet := func(a, b tokenGrant) int { return cmp.Compare(a.ret, b.ret) }
	for _, m := range w.byProc {
		for _, gs := range m {
			slices.SortStableFunc(gs, byRet)
		}
	}
	for _, gs := range w.byToken {
		slices.SortStableFunc(gs, byRet)
	}
}

// owner is the owner op acted for: "" for a write without an owner whose
// process had not been given its token; attributable is false only for such
// a write in a history without any answered token-granting acquisition (a
// history of the resource alone: nothing can be attributed).
func (w *writers) owner(op *history.Operation) (owner string, attributable bool) {
	if op.Owner != "" {
		return op.Owner, true
	}
	if !w.indexed {
		w.index()
	}
	gs := w.byProc[op.Process][op.Token]
	n := sort.Search(len(gs), func(n int) bool { return gs[n].ret > op.T })
	if n == 0 {
		return "", w.any
	}
	return gs[n-1].owner, true
}

// neverGiven reports an ownerless write whose process was never given its
// token (FAIL, token-not-given: never a hazard, since no lost write gives a
// process a token it did not ask for), naming who was given it, if anyone.
func (w *writers) neverGiven(key string, op *history.Operation, c *collector) {
	if c.full(KindTokenNotGiven) {
		c.skip(KindTokenNotGiven, op)
		return
	}
	ops := []*history.Operation{op}
	who := "no acquisition of the history was given it"
	if gs := w.byToken[op.Token]; len(gs) > 0 {
		g := gs[0]
		who = fmt.Sprintf("it was given to process %d (owner %s, ok at %s)", g.op.Process, g.owner, fmtT(g.ret))
		if g.ret > op.T && g.op.Process == op.Process {
			who = fmt.Sprintf("its process was given it only later (owner %s, ok at %s)", g.owner, fmtT(g.ret))
		}
		ops = append(ops, g.op)
	}
	outcome := map[history.Type]string{history.OK: "accepted", history.Fail: "rejected", history.Info: "of unknown outcome"}[op.Type]
	c.fail(KindTokenNotGiven, key, fmt.Sprintf("write with token %d by process %d (%s, invoked at %s), which had not been given that token by any answered acquisition of its own: %s",
		op.Token, op.Process, outcome, fmtT(op.T), who), ops...)
}

// seqMatchesRealTime reports a resource whose seq order contradicts real
// time: a write numbered after another although it completed before that
// other was invoked. Such numbers cannot be an apply order.
func seqMatchesRealTime(h *history.History, key string, idx []int, c *collector) {
	seq := make([]int, 0, len(idx))
	for _, k := range idx {
		if h.Ops[k].Type != history.Info {
			seq = append(seq, k)
		}
	}
	slices.SortStableFunc(seq, func(a, b int) int { return cmp.Compare(h.Ops[a].Seq, h.Ops[b].Seq) })
	var latest *history.Operation // the latest-invoked write among smaller seqs
	for _, k := range seq {
		op := &h.Ops[k]
		if latest != nil && latest.Seq < op.Seq && latest.T > op.Return {
			if c.full(KindSeqOrder) {
				c.skip(KindSeqOrder, op, latest)
			} else {
				c.fail(KindSeqOrder, key, fmt.Sprintf("the resource numbered a write seq %d, after a write seq %d that was invoked at %s, once it had completed at %s: its order contradicts real time",
					op.Seq, latest.Seq, fmtT(latest.T), fmtT(op.Return)), op, latest)
			}
		}
		if latest == nil || op.T > latest.T {
			latest = op
		}
	}
}

// reusedTokens reports accepted writes that carry a token an earlier-accepted
// write of another owner already carried. It does not depend on the apply
// order: whichever of the two came second was stale. A write without an
// owner field acted for the owner its process's acquisition of the token
// names (writers); one whose process was never given its token is reported
// here too.
func reusedTokens(h *history.History, key string, idx []int, c *collector, ws *writers) {
	type write struct {
		op    *history.Operation
		owner string
	}
	type ownedWrite struct {
		k     int
		owner string
	}
	first := make(map[int64]write, len(idx))
	oks := make([]ownedWrite, 0, len(idx))
	for _, k := range idx {
		op := &h.Ops[k]
		if op.Token <= 0 {
			continue
		}
		o, attributable := ws.owner(op)
		if o == "" && attributable {
			ws.neverGiven(key, op, c)
			continue
		}
		if op.Type == history.OK && o != "" {
			oks = append(oks, ownedWrite{k, o})
		}
	}
	slices.SortStableFunc(oks, func(a, b ownedWrite) int { return cmp.Compare(h.Ops[a.k].Return, h.Ops[b.k].Return) })
	for _, w := range oks {
		op, owner := &h.Ops[w.k], w.owner
		prev, seen := first[op.Token]
		switch {
		case !seen:
			first[op.Token] = write{op, owner}
		case prev.owner != owner && c.full(KindTokenReused):
			c.skip(KindTokenReused, prev.op, op)
		case prev.owner != owner:
			c.fail(KindTokenReused, key, fmt.Sprintf("token %d reused by another owner: accepted from owner %s (ok at %s) and from owner %s (ok at %s); the counter regressed and the resource cannot tell the writers apart",
				op.Token, prev.owner, fmtT(prev.op.Return), owner, fmtT(op.Return)), prev.op, op)
		}
	}
}

func allSeq(h *history.History, idx []int) bool {
	for _, k := range idx {
		if op := &h.Ops[k]; op.Type != history.Info && op.Seq == 0 {
			return false
		}
	}
	return true
}

// returnedMax answers "the ok operation with the largest token among those
// that returned strictly before t", for the real-time order rules: an
// operation invoked at t comes after every one of them.
type returnedMax struct {
	h      *history.History
	ret    []int64 // completion times, ascending
	argmax []int   // argmax[n]: the op with the largest token among the first n+1
}

func newReturnedMax(h *history.History, oks []int) returnedMax {
	by := slices.Clone(oks)
	slices.SortFunc(by, func(a, b int) int { return cmp.Compare(h.Ops[a].Return, h.Ops[b].Return) })
	rm := returnedMax{h: h, ret: make([]int64, len(by)), argmax: make([]int, len(by))}
	for n, k := range by {
		rm.ret[n], rm.argmax[n] = h.Ops[k].Return, k
		if n > 0 && h.Ops[rm.argmax[n-1]].Token >= h.Ops[k].Token {
			rm.argmax[n] = rm.argmax[n-1]
		}
	}
	return rm
}

// before returns that operation, or nil when none returned before t.
func (rm returnedMax) before(t int64) *history.Operation {
	m := sort.Search(len(rm.ret), func(n int) bool { return rm.ret[n] >= t })
	if m == 0 {
		return nil
	}
	return &rm.h.Ops[rm.argmax[m-1]]
}

// infoIndex answers "the largest token of an info write invoked at or
// before t" for the lenient rejection rule.
type infoIndex struct {
	t   []int64
	max []int64
}

func newInfoIndex(h *history.History, idx []int, include func(*history.Operation) bool) infoIndex {
	sel := make([]int, 0, len(idx))
	for _, k := range idx {
		if include(&h.Ops[k]) {
			sel = append(sel, k)
		}
	}
	slices.SortFunc(sel, func(a, b int) int { return cmp.Compare(h.Ops[a].T, h.Ops[b].T) })
	ix := infoIndex{t: make([]int64, len(sel)), max: make([]int64, len(sel))}
	for n, k := range sel {
		ix.t[n] = h.Ops[k].T
		ix.max[n] = h.Ops[k].Token
		if n > 0 && ix.max[n-1] > ix.max[n] {
			ix.max[n] = ix.max[n-1]
		}
	}
	return ix
}

// maxBy returns the largest token invoked at or before t (0 if none).
func (ix infoIndex) maxBy(t int64) int64 {
	m := sort.Search(len(ix.t), func(n int) bool { return ix.t[n] > t })
	if m == 0 {
		return 0
	}
	return ix.max[m-1]
}

func fencedBySeq(h *history.History, key string, idx []int, c *collector) {
	seq := make([]int, 0, len(idx))
	for _, k := range idx {
		if h.Ops[k].Type != history.Info {
			seq = append(seq, k)
		}
	}
	slices.SortFunc(seq, func(a, b int) int { return cmp.Compare(h.Ops[a].Seq, h.Ops[b].Seq) })
	info := newInfoIndex(h, idx, func(op *history.Operation) bool { return op.Type == history.Info })
	var maxTok int64
	var maxOp *history.Operation
	for n, k := range seq {
		op := &h.Ops[k]
		if n > 0 && h.Ops[seq[n-1]].Seq == op.Seq {
			c.undecided(key, fmt.Sprintf("two writes with seq %d: the apply order is ambiguous", op.Seq), &h.Ops[seq[n-1]], op)
		}
		switch op.Type {
		case history.OK:
			if op.Token <= 0 {
				c.fail(KindBadToken, key, fmt.Sprintf("write with non-positive token %d accepted (seq %d)", op.Token, op.Seq), op)
			} else if op.Token < maxTok && c.full(KindStaleWrite) {
				c.skip(KindStaleWrite, maxOp, op)
			} else if op.Token < maxTok {
				c.fail(KindStaleWrite, key, fmt.Sprintf("stale write accepted: token %d after token %d (seq %d after seq %d)", op.Token, maxTok, op.Seq, maxOp.Seq), maxOp, op)
			}
			if op.Token > maxTok {
				maxTok, maxOp = op.Token, op
			}
		case history.Fail:
			if op.Token > 0 && op.Token >= maxTok && info.maxBy(op.Return) <= op.Token {
				msg := fmt.Sprintf("write with token %d rejected (seq %d) though the largest accepted token was %d", op.Token, op.Seq, maxTok)
				if maxOp == nil {
					msg = fmt.Sprintf("write with token %d rejected (seq %d) though no token had been accepted", op.Token, op.Seq)
				}
				c.fail(KindWrongReject, key, msg, maxOp, op)
			}
		}
	}
}

func fencedRealTime(h *history.History, key string, idx []int, c *collector) {
	oks := make([]int, 0, len(idx))
	for _, k := range idx {
		if h.Ops[k].Type == history.OK {
			oks = append(oks, k)
		}
	}
	accepted := newReturnedMax(h, oks)
	// Writes that may have been applied (ok or info), by invocation.
	maybe := newInfoIndex(h, idx, func(op *history.Operation) bool { return op.Type != history.Fail })
	for _, k := range idx {
		op := &h.Ops[k]
		switch op.Type {
		case history.OK:
			if op.Token <= 0 {
				c.fail(KindBadToken, key, fmt.Sprintf("write with non-positive token %d accepted", op.Token), op)
				continue
			}
			if prev := accepted.before(op.T); prev != nil && prev.Token > op.Token {
				if c.full(KindStaleWrite) {
					c.skip(KindStaleWrite, prev, op)
					continue
				}
				c.fail(KindStaleWrite, key, fmt.Sprintf("stale write accepted: token %d, invoked at %s after the write with token %d was accepted at %s",
					op.Token, fmtT(op.T), prev.Token, fmtT(prev.Return)), prev, op)
			}
		case history.Fail:
			if op.Token <= 0 {
				continue
			}
			if m := maybe.maxBy(op.Return); m <= op.Token {
				c.fail(KindWrongReject, key, fmt.Sprintf("write with token %d rejected at %s though no write with a larger token had been invoked (largest: %d)",
					op.Token, fmtT(op.Return), m), op)
			}
		}
	}
}
