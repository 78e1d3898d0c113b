package models

import (
	"cmp"
	"slices"

	"github.com/coordtorture/coordtorture/history"
)

// Uncertainty is how many operations of a history had an unknown outcome
// and, where the history shows it, how many of them really happened.
type Uncertainty struct {
	// Info counts the client operations completed info (or never completed).
	Info int `json:"info"`
	// InfoAcquisitions counts the acquisitions among them (locks, leases,
	// read-write leases, semaphore permits).
	InfoAcquisitions int `json:"info_acquisitions"`
	// Executed is how many of the token-granting ones consumed a fencing token
	// (the counter increments once per grant, so every token between the
	// smallest and largest granted that no ok acquisition got was taken by
	// an uncertain one); -1 when the tokens cannot tell (no tokens, or
	// tokens that do not increase, as after a counter reset).
	Executed int `json:"executed"`
	// Observed is how many of those acquisitions a sampler saw holding the
	// lease (f "sample" operations whose owner is theirs): they certainly
	// happened, whatever the tokens say; -1 when the history has no sample
	// that saw the lock held.
	Observed int `json:"observed"`
}

// CountUncertain measures h's uncertainty (see Uncertainty).
func CountUncertain(h *history.History) Uncertainty {
	u := Uncertainty{Executed: -1, Observed: observed(h)}
	byKey := map[string][]*history.Operation{}
	infoByKey := map[string]int{}
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F == history.FNemesis || op.F == history.FLeakScan || op.F == history.FSample {
			continue
		}
		if op.Type == history.Info {
			u.Info++
			if m, _ := acquireMode(op.F); m != modeNone {
				u.InfoAcquisitions++
			}
		}
		if !isTokenAcquire(op.F) {
			continue
		}
		switch op.Type {
		case history.Info:
			infoByKey[op.Key]++
		case history.OK:
			if op.Token > 0 {
				byKey[op.Key] = append(byKey[op.Key], op)
			}
		}
	}
	if len(byKey) == 0 {
		return u
	}
	executed := 0
	for key, oks := range byKey {
		slices.SortFunc(oks, func(a, b *history.Operation) int { return cmp.Compare(a.Return, b.Return) })
		for i := 1; i < len(oks); i++ {
			// Real-time order must agree with token order for the gaps to
			// mean anything.
			if oks[i].T > oks[i-1].Return && oks[i].Token <= oks[i-1].Token {
				return u
			}
		}
		tokens := make([]int64, len(oks))
		for i, o := range oks {
			tokens[i] = o.Token
		}
		slices.Sort(tokens)
		tokens = slices.Compact(tokens)
		gaps := int(tokens[len(tokens)-1]-tokens[0]+1) - len(tokens)
		if gaps > infoByKey[key] {
			return u // more gaps than uncertain grants: not a counter of grants
		}
		executed += gaps
	}
	u.Executed = executed
	return u
}

// observed counts the info acquisitions whose owner an ok sample saw holding
// the lease, or returns -1 when no sample saw the lock held.
func observed(h *history.History) int {
	ix := indexAttempts(h)
	seen := map[int]bool{}
	saw := false
	for k := range h.Ops {
		s := &h.Ops[k]
		if s.F != history.FSample || s.Type != history.OK || s.Owner == "" {
			continue
		}
		saw = true
		for _, j := range ix.match(idOf(s), s.Owner) {
			if a := &h.Ops[j]; a.Type == history.Info && a.T <= s.Return {
				seen[j] = true
			}
		}
	}
	if !saw {
		return -1
	}
	return len(seen)
}
