package models

import (
	"fmt"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// attempts indexes the exclusive acquisitions of a history that carry an
// owner, by lock and owner, for matching sampled lease values to them. An
// acquisition is indexed under its owner and under every part of it before
// a colon: an answered fenced acquisition records "<owner>:<token>", and the
// same attempt may have left "<owner>:<another token>" on another server (a
// resend after a failover runs the script again on the new primary, whose
// counter is behind, while the old primary still holds the first run's lease).
type attempts map[lockID]map[string][]int

func indexAttempts(h *history.History) attempts {
	ix := attempts{}
	for k := range h.Ops {
		op := &h.Ops[k]
		if m, _ := acquireMode(op.F); m != modeExclusive || op.Owner == "" {
			continue
		}
		id := idOf(op)
		if ix[id] == nil {
			ix[id] = map[string][]int{}
		}
		ix[id][op.Owner] = append(ix[id][op.Owner], k)
		for i := 0; i < len(op.Owner); i++ {
			if op.Owner[i] == ':' {
				ix[id][op.Owner[:i]] = append(ix[id][op.Owner[:i]], k)
			}
		}
	}
	return ix
}

// match returns the acquisitions of lock id that a sampled lease value v
// belongs to: those whose owner is v, or the part of v before one of its
// colons (a fenced lease holds "<owner>:<token>"; an attempt that failed or
// whose outcome is unknown recorded only the owner it sent).
func (ix attempts) match(id lockID, v string) []int {
	byOwner := ix[id]
	if byOwner == nil {
		return nil
	}
	out := byOwner[v]
	for i := strings.IndexByte(v, ':'); i >= 0; {
		out = append(out, byOwner[v[:i]]...)
		j := strings.IndexByte(v[i+1:], ':')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return out
}

// CheckNoPhantomOwner checks the lock states a sampler observed (f "sample":
// ok with the value the lease held at some instant of the read, empty when
// none) against the acquisitions of the same lock (key, field) and their
// owners. A sampled owner must belong to an acquisition that may have
// happened:
//
//   - one that belongs to an acquisition that answered fail (definitely not
//     acquired), read after that answer, is KindPhantomOwner: the client was
//     told it did not get the lease while the lease was its (a retried
//     acquisition that does not recognise its own first run does that). A
//     read that overlaps the attempt proves nothing: an attempt may take and
//     give back the lease before it answers;
//   - one that belongs to no acquisition, or only to acquisitions invoked
//     after the read completed, is KindUnknownOwner. When acquisitions of
//     that lock without an owner were invoked before the read, the value may
//     be theirs: undecided (UNKNOWN), not FAIL.
//
// Owners of ok and info acquisitions are fine. A history whose samples never
// saw the lock held has nothing to check: UNKNOWN, never PASS. O(n).
func CheckNoPhantomOwner(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	ix := indexAttempts(h)
	// Per lock, the earliest invocation of an acquisition without an owner.
	anonymous := map[lockID]int64{}
	for k := range h.Ops {
		op := &h.Ops[k]
		if m, _ := acquireMode(op.F); m == modeExclusive && op.Owner == "" {
			if t, ok := anonymous[idOf(op)]; !ok || op.T < t {
				anonymous[idOf(op)] = op.T
			}
		}
	}
	samples, held, failed := 0, 0, 0
	for k := range h.Ops {
		s := &h.Ops[k]
		if s.F != history.FSample {
			continue
		}
		samples++
		if s.Type != history.OK {
			failed++
			continue
		}
		if s.Owner == "" {
			continue
		}
		held++
		id := idOf(s)
		var before, phantom []*history.Operation
		explained := false
		for _, j := range ix.match(id, s.Owner) {
			a := &h.Ops[j]
			if a.T > s.Return {
				continue // invoked after the read: cannot be what it saw
			}
			before = append(before, a)
			switch {
			case a.Type != history.Fail:
				explained = true
			case s.T > a.Return:
				phantom = append(phantom, a)
			default:
				explained = true // the read overlaps the attempt
			}
		}
		switch {
		case explained:
		case len(phantom) > 0:
			if c.full(KindPhantomOwner) {
				c.skip(KindPhantomOwner, phantom[0], s)
				continue
			}
			a := phantom[0]
			c.fail(KindPhantomOwner, id.String(), fmt.Sprintf("the lease held %q at [%s, %s], after proc %d's acquisition with that owner answered fail (not acquired) at %s",
				s.Owner, fmtT(s.T), fmtT(s.Return), a.Process, fmtT(a.Return)), a, s)
		default:
			if t, ok := anonymous[id]; ok && t <= s.Return {
				c.undecided(id.String(), fmt.Sprintf("the lease held %q at [%s, %s], which no acquisition recorded; acquisitions without an owner (the first invoked at %s) may have sent it",
					s.Owner, fmtT(s.T), fmtT(s.Return), fmtT(t)), s)
				continue
			}
			if c.full(KindUnknownOwner) {
				c.skip(KindUnknownOwner, s)
				continue
			}
			msg := fmt.Sprintf("the lease held %q at [%s, %s], the owner of no acquisition", s.Owner, fmtT(s.T), fmtT(s.Return))
			if len(before) == 0 && len(ix.match(id, s.Owner)) > 0 {
				msg = fmt.Sprintf("the lease held %q at [%s, %s], before any acquisition with that owner was invoked", s.Owner, fmtT(s.T), fmtT(s.Return))
			}
			c.fail(KindUnknownOwner, id.String(), msg, s)
		}
	}
	if held == 0 && c.n == 0 {
		why := "no sample operation"
		if samples > 0 {
			why = fmt.Sprintf("none of %s (%d failed) saw the lock held", Plural(samples, "sample"), failed)
		}
		c.undecided("", why+": nothing to check")
	}
	r := c.result("no-phantom-owner", samples, fmt.Sprintf("%s (%d saw an owner, %d failed): every owner seen belongs to an acquisition that may have happened",
		Plural(samples, "sample"), held, failed))
	r.Elapsed = time.Since(start)
	return r
}
