package models

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// HeaderOptions encodes o, with its defaults filled in, for a history's
// header (history.Header.Options): a check of the history reads back exactly
// the options the run used.
func HeaderOptions(o Options) json.RawMessage {
	b, err := json.Marshal(o.withDefaults())
	if err != nil { // Options holds only numbers and booleans
		panic(err)
	}
	return b
}

// HeaderProperty is p as a history's header states it.
func HeaderProperty(p Property) history.HeaderProperty {
	e, _ := p.Expect.MarshalText()
	return history.HeaderProperty{Checker: p.Checker, Expect: string(e), HazardKinds: p.HazardKinds()}
}

// FromHeader returns the properties and the checker options a history's
// header states. A property's HazardKinds are taken as stated (a
// may-show-hazard property that lists none counts no kind as the hazard).
func FromHeader(h *history.Header) ([]Property, Options, error) {
	var o Options
	if len(h.Options) > 0 {
		if err := json.Unmarshal(h.Options, &o); err != nil {
			return nil, o, fmt.Errorf("models: the header's options: %w", err)
		}
	}
	ps := make([]Property, 0, len(h.Properties))
	for _, hp := range h.Properties {
		p := Property{Checker: hp.Checker}
		if err := p.Expect.UnmarshalText([]byte(hp.Expect)); err != nil {
			return nil, o, err
		}
		if p.Expect == MayHazard {
			p.Hazards = append([]string{}, hp.HazardKinds...)
		}
		ps = append(ps, p)
	}
	return ps, o, nil
}

// FaultsNotHappened lists why the faults a run scheduled (a scenario with a
// nemesis; scheduled events) did not all happen in its history h: a nemesis
// operation that did not complete ok, fewer nemesis operations than were
// scheduled (the run ended first), or no fault scheduled at all. Such a run
// is UNKNOWN (a FAIL found anyway still stands). Proofs of effects
// (NemesisEffect operations) are not faults and are not counted.
func FaultsNotHappened(h *history.History, nemesis bool, scheduled int) []string {
	var out []string
	ran := 0
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F != history.FNemesis || IsEffect(op.Key) {
			continue
		}
		ran++
		if op.Type != history.OK {
			why := op.Err
			if why == "" {
				why = "it did not complete"
			}
			out = append(out, fmt.Sprintf("nemesis event %q at %v failed: %s", op.Value, time.Duration(op.T).Round(time.Millisecond), why))
		}
	}
	if ran < scheduled {
		out = append(out, fmt.Sprintf("%d of the %s did not happen: the run ended first", scheduled-ran, Plural(scheduled, "scheduled nemesis event")))
	}
	if nemesis && scheduled == 0 {
		out = append(out, "no fault was scheduled: the scenario's faults need a longer run")
	}
	return out
}

// NothingToCheck reports whether h holds nothing checker reads, so that a
// run's reason for not checking it (history.HeaderProperty.NotChecked: an
// implementation without fencing tokens, servers the harness does not scan)
// can be confirmed from the history: leaks without a leak_scan operation,
// token-order without an acquisition answered with a token, any checker on
// a history without a single operation (a run on a server that lacked what
// its scenario needs ran nothing). For any other checker, or a history
// holding what it reads, the reason is not enough: the property is checked.
func NothingToCheck(checker string, h *history.History) bool {
	if len(h.Ops) == 0 {
		return true
	}
	switch checker {
	case "leaks":
		return !hasF(history.FLeakScan)(h)
	case "token-order":
		return !hasOp(h, func(op *history.Operation) bool {
			return isTokenAcquire(op.F) && op.Type == history.OK && op.Token != 0
		})
	}
	return false
}

// CheckProperty judges property p on h, the one way coordtorture run and
// fencecheck both judge a property: N/A (JudgedNA, notChecked as the
// result's summary) when notChecked gives the run's reason for not
// checking it and h confirms there is nothing to check (NothingToCheck);
// else its checker's result with o, judged by Judge against the history's
// proven fault effects. Every verdict is recomputed: a header carries data
// (options, expectations, the servers' state read after the run), never a
// verdict. ok is false when no checker has p's name.
func CheckProperty(h *history.History, p Property, notChecked string, o Options, effects []Effect) (r Result, j Judgement, ok bool) {
	if notChecked != "" && NothingToCheck(p.Checker, h) {
		return Result{Checker: p.Checker, Verdict: Unknown, Summary: notChecked}, JudgedNA, true
	}
	c, ok := Lookup(p.Checker)
	if !ok {
		return Result{Checker: p.Checker, Verdict: Unknown}, JudgedUnknown, false
	}
	r = c.Check(h, o)
	return r, Judge(p, &r, effects), true
}
