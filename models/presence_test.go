package models

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// The checkers compute each violation's Reach.Since (the latest proof of
// presence of the leases a loss must have erased) incrementally, during
// their sweeps (presence.go). These tests hold them to brute-force
// references, which scan every window or operation for every violation, on
// random small histories that violate a lot; and bound the work on a
// history that violates at every operation.

// randomLeaseHistory: n operations on two locks by four processes, with
// distinct invocation times: acquisitions of mode f (and, for rw, of both
// modes), ok or unknown, with or without ttl, some with n > 1; renewals,
// verifications and releases of earlier owners answered at random.
func randomLeaseHistory(r *rand.Rand, n int, fs []string) *history.History {
	b := &opsBuilder{}
	type lease struct {
		key, owner string
	}
	var leases []lease
	t := int64(0)
	for len(b.ops) < n {
		t += 1 + r.Int64N(3)
		ret := t + r.Int64N(4)
		proc := r.IntN(4)
		key := keyName(r.IntN(2))
		if len(leases) == 0 || r.IntN(3) == 0 {
			op := history.Op{F: fs[r.IntN(len(fs))], Key: key, Owner: fmt.Sprint("o", len(b.ops))}
			if r.IntN(2) == 0 {
				op.TTLMs = 1 + r.Int64N(3)
			}
			if op.F == history.FSemAcquire {
				op.Capacity, op.N = 1+r.Int64N(3), 1+r.Int64N(2)
			}
			typ := history.OK
			if r.IntN(5) == 0 {
				typ = history.Info
			}
			b.add(proc, t*msNs/4, ret*msNs/4, typ, op)
			leases = append(leases, lease{key, op.Owner})
			continue
		}
		l := leases[r.IntN(len(leases))]
		op := history.Op{Key: l.key, Owner: l.owner}
		typ := history.OK
		switch r.IntN(3) {
		case 0:
			op.F = history.FRenew
			if r.IntN(2) == 0 {
				op.TTLMs = 1 + r.Int64N(3)
			}
			typ = []history.Type{history.OK, history.OK, history.Fail, history.Info}[r.IntN(4)]
		case 1:
			op.F, op.Value = history.FVerify, []string{history.ValueTrue, history.ValueTrue, history.ValueFalse}[r.IntN(3)]
		case 2:
			op.F, op.Value = history.FRelease, []string{history.ValueReleased, history.ValueNotOwned, history.ValueAlreadyReleased}[r.IntN(3)]
		}
		b.add(proc, t*msNs/4, ret*msNs/4, typ, op)
	}
	return b.history()
}

// refOverlapReaches is sweepConflicts' reaches computed by brute force: for
// each non-empty window overlapping an earlier conflicting one of its lock
// (in sortedByID's order), Since is the latest presentBy of every earlier
// conflicting window open when it starts, found by scanning them all.
func refOverlapReaches(h *history.History, set *holdSet, drift int64, conflicts func(a, b mode) bool) []Reach {
	hs := set.holds
	idx := sortedByID(hs)
	var out []Reach
	for n, k := range idx {
		hd := &hs[k]
		if hd.end <= hd.start {
			continue
		}
		since, any := int64(-1), false
		for _, j := range idx[:n] {
			if o := &hs[j]; o.kid == hd.kid && o.end > hd.start && conflicts(o.mode, hd.mode) {
				since, any = max(since, set.presentBy(h, o, hd.start)), true
			}
		}
		if !any {
			continue
		}
		// The horizon is the furthest-ending earlier window's of the first
		// conflicting mode that overlaps (the earliest of equal ends).
		for _, m := range []mode{modeExclusive, modeRead, modeWrite} {
			f := -1
			for _, j := range idx[:n] {
				if o := &hs[j]; o.kid == hd.kid && o.mode == m && (f < 0 || o.end > hs[f].end) {
					f = int(j)
				}
			}
			if f >= 0 && conflicts(m, hd.mode) && hs[f].end > hd.start {
				out = append(out, Reach{Kind: KindOverlap, Key: hd.id.String(), Since: since, First: hd.start, Last: hd.start,
					Horizon: horizonOf(hs[f].maxTTL, drift)})
				break
			}
		}
	}
	return out
}

// refCapacityReaches is CheckSemaphore's reaches computed by brute force:
// at each episode over capacity, the open permits are found by scanning the
// events so far and lostSince's presentBy by scanning their proofs.
func refCapacityReaches(h *history.History, set *holdSet, drift int64, o Options) []Reach {
	hs := set.holds
	capOf := permitCapacities(h, hs, o)
	idx := sortedByID(hs)
	var out []Reach
	for lo := 0; lo < len(idx); {
		hi := lo
		for hi < len(idx) && hs[idx[hi]].kid == hs[idx[lo]].kid {
			hi++
		}
		type event struct {
			t, w int64
			hold int32
		}
		var events []event
		for _, k := range idx[lo:hi] {
			if hd := &hs[k]; hd.end > hd.start {
				events = append(events, event{hd.start, hd.weight, k}, event{hd.end, -hd.weight, k})
			}
		}
		id := hs[idx[lo]].id
		lo = hi
		if !slices.ContainsFunc(events, func(e event) bool { return capOf[e.hold] > 0 }) {
			continue
		}
		slices.SortFunc(events, func(a, b event) int {
			if c := cmp.Compare(a.t, b.t); c != 0 {
				return c
			}
			return cmp.Compare(a.w, b.w)
		})
		var held int64
		over := false
		var caps capBound
		for n, e := range events {
			held += e.w
			caps.add(capOf[e.hold], e.w > 0)
			limit := caps.min()
			if limit > 0 && held > limit && !over {
				over = true
				// Open: started among events[:n+1] and not ended there.
				var open []int32
				for _, s := range events[:n+1] {
					if s.w > 0 && !slices.ContainsFunc(events[:n+1], func(x event) bool { return x.w < 0 && x.hold == s.hold }) {
						open = append(open, s.hold)
					}
				}
				horizon := int64(0)
				for _, k := range open {
					horizon = max(horizon, horizonOf(hs[k].maxTTL, drift))
				}
				out = append(out, Reach{Kind: KindOverCapacity, Key: id.String(), Since: lostSince(h, set, open, e.hold, e.t, held-limit),
					First: e.t, Last: e.t, Horizon: horizon})
			} else if held <= limit {
				over = false
			}
		}
	}
	return out
}

// refPresentBy is the latest instant by t at which the lease acquired by
// h.Ops[acq] is known on the server, by its definition: the invocation of
// its owner's latest proof (matched by key and owner) invoked by t, else the
// acquisition's invocation.
func refPresentBy(h *history.History, acq int, t int64) int64 {
	a := &h.Ops[acq]
	at := a.T
	for k := acq + 1; k < len(h.Ops); k++ {
		if op := &h.Ops[k]; op.Key == a.Key && op.Owner == a.Owner && op.T <= t && isProof(op) {
			at = max(at, op.T)
		}
	}
	return at
}

func TestReachSinceMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 1))
	o := Options{MaxEvidence: 1 << 20}.withDefaults()
	drift := int64(o.Drift)
	counts := map[string]int{}
	for iter := 0; iter < 400; iter++ {
		n := 5 + r.IntN(60)
		// Exclusion and rw-exclusion.
		for _, fs := range [][]string{{history.FAcquire}, {history.FAcquireRead, history.FAcquireWrite}} {
			h := randomLeaseHistory(r, n, fs)
			modes, conflicts := func(m mode) bool { return m == modeExclusive }, func(a, b mode) bool { return true }
			res := CheckExclusion(h, o)
			if fs[0] != history.FAcquire {
				res = CheckReadWrite(h, o)
				modes, conflicts = func(m mode) bool { return m == modeRead || m == modeWrite }, func(a, b mode) bool { return a == modeWrite || b == modeWrite }
			}
			set := buildHolds(h, drift, modes, o.UncertainRenewalReleases)
			// The sweep's reaches, then those of uncertain acquisitions
			// proven only at a proof (pointConflicts, outside the sweep).
			pc := newCollector(o)
			pointConflicts(h, set, pc, drift, conflicts)
			want := append(refOverlapReaches(h, set, drift, conflicts), pc.reaches...)
			if !slices.Equal(res.Reaches, want) {
				t.Fatalf("%s, iteration %d: reaches\n%v\nwant (brute force)\n%v\n%s", res.Checker, iter, res.Reaches, want, dumpOps(h))
			}
			counts[res.Checker] += len(want)
		}
		// Semaphore.
		h := randomLeaseHistory(r, n, []string{history.FSemAcquire})
		res := CheckSemaphore(h, o)
		set := buildHolds(h, drift, func(m mode) bool { return m == modePermit }, o.UncertainRenewalReleases)
		pc := newCollector(o)
		pointOverCapacity(h, set, pc, drift, permitCapacities(h, set.holds, o))
		want := append(refCapacityReaches(h, set, drift, o), pc.reaches...)
		if !slices.Equal(res.Reaches, want) {
			t.Fatalf("semaphore, iteration %d: reaches\n%v\nwant (brute force)\n%v\n%s", iter, res.Reaches, want, dumpOps(h))
		}
		counts[res.Checker] += len(want)
		// Lease protocol: each reach's lease is named by its evidence (the
		// first operation: the lease whose certain span the violation falls
		// in, or the denied lease).
		h = randomLeaseHistory(r, n, []string{history.FAcquire})
		res = CheckLeaseProtocol(h, o)
		var ev []Evidence
		for _, e := range res.Evidence {
			if e.Kind == KindOwnerConflict || e.Kind == KindWronglyDenied {
				ev = append(ev, e)
			}
		}
		if len(ev) != len(res.Reaches) {
			t.Fatalf("lease-protocol, iteration %d: %d reaches, %d evidence", iter, len(res.Reaches), len(ev))
		}
		for i, rc := range res.Reaches {
			acq := int(ev[i].Ops[0].I)
			if want := min(refPresentBy(h, acq, rc.First), rc.First); rc.Since != want || rc.Kind != ev[i].Kind {
				t.Fatalf("lease-protocol, iteration %d: reach %+v of %s, want since %d (brute force)\n%s", iter, rc, ev[i], want, dumpOps(h))
			}
		}
		counts[res.Checker] += len(res.Reaches)
	}
	// Something was compared.
	for _, c := range []string{"exclusion", "rw-exclusion", "semaphore", "lease-protocol"} {
		if counts[c] < 100 {
			t.Errorf("%s: only %d reaches compared", c, counts[c])
		}
	}
	t.Logf("reaches compared: %v", counts)
}

func dumpOps(h *history.History) string {
	s := ""
	for k := range h.Ops {
		s += fmt.Sprintf("%s ret=%d\n", h.Ops[k].String(), h.Ops[k].Return)
	}
	return s
}
