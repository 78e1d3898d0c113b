package models

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// Expectation says what a property's violation means in a scenario.
type Expectation int

const (
	// MustHold: a violation is a bug (FAIL).
	MustHold Expectation = iota
	// MayHazard: the fault is one of the documented hazards (asynchronous
	// failover, restore, eviction, clock skew) that can break the property.
	// Violations are judged one by one (Judge): the property is HAZARD, with
	// its evidence, only when every violation is of a kind the hazard
	// produces (Property.HazardKinds), was not complete before the fault
	// with a proven effect began and, where the checker says where its
	// violations lie, lies within that fault's reach; any other violation
	// makes it FAIL. A stale
	// write the resource accepted is never the hazard: it is the resource's
	// own bug.
	MayHazard
)

// String is "must hold" or "may show hazard".
func (e Expectation) String() string {
	if e == MayHazard {
		return "may show hazard"
	}
	return "must hold"
}

// MarshalText encodes the expectation as in a history's header:
// "must-hold" or "may-show-hazard".
func (e Expectation) MarshalText() ([]byte, error) {
	if e == MayHazard {
		return []byte("may-show-hazard"), nil
	}
	return []byte("must-hold"), nil
}

// UnmarshalText decodes "must-hold" or "may-show-hazard" (or the String
// forms).
func (e *Expectation) UnmarshalText(b []byte) error {
	switch string(b) {
	case "must-hold", "must hold":
		*e = MustHold
	case "may-show-hazard", "may show hazard":
		*e = MayHazard
	default:
		return fmt.Errorf("models: unknown expectation %q (want must-hold or may-show-hazard)", b)
	}
	return nil
}

// Property is one checker with its expectation in a scenario.
type Property struct {
	// Checker names a checker of the registry (Lookup), or a scenario's own
	// check.
	Checker string `json:"checker"`
	// Expect says what a violation means.
	Expect Expectation `json:"expect"`
	// Hazards are the violation kinds (Kind…) a MayHazard property counts
	// as the hazard; nil means the checker's defaults (DefaultHazards).
	Hazards []string `json:"hazard_kinds,omitempty"`
}

// DefaultHazards are the violation kinds a checker's MayHazard property
// counts as the hazard by default: what a lost counter increment or lease can
// do. KindStaleWrite is never one.
var DefaultHazards = map[string][]string{
	"fenced-resource": {KindTokenReused},
	"token-order":     {KindTokenDuplicate, KindTokenRegressed, KindNotLinearizable},
	"exclusion":       {KindOverlap, KindOverCapacity},
	"lease-protocol":  {KindOwnerConflict, KindWronglyDenied}, // a lost lease: denied to its holder, granted to another
}

// HazardKinds is the set of kinds p counts as the hazard (none when it must
// hold).
func (p Property) HazardKinds() []string {
	if p.Expect != MayHazard {
		return nil
	}
	if p.Hazards != nil {
		// Whoever wrote them (a scenario, a history's header), kinds that no
		// lost write can explain are never the hazard.
		return slices.DeleteFunc(slices.Clone(p.Hazards), func(k string) bool { return slices.Contains(NeverHazard, k) })
	}
	return DefaultHazards[p.Checker]
}

// NeverHazard are the violation kinds no documented hazard can explain, so
// they are FAIL whatever a property says: a resource accepting a stale
// write (its own defence failed), a seq order contradicting real time, a
// non-positive token, a phantom or unknown owner, a latch counted below zero
// (every decrement checks the count: no lost write lets one underflow) or
// counted down more than once by one call (a lost write can only leave a
// count higher, never lower).
var NeverHazard = []string{KindStaleWrite, KindSeqOrder, KindBadToken, KindPhantomOwner, KindUnknownOwner, KindLatchUnderflow,
	KindLatchDecrementedTwice, KindTokenNotGiven}

// Judgement is a property's verdict in a scenario run: its checker's Verdict
// read under the property's Expectation, or the worst of a run's.
type Judgement string

// The judgements, from best to worst.
const (
	// JudgedPass: the property held.
	JudgedPass Judgement = "PASS"
	// JudgedHazard: the documented hazard, shown with proof (a proven fault
	// effect before every violation, every violation of the hazard's kinds).
	JudgedHazard Judgement = "HAZARD"
	// JudgedUnknown: undecided (a checker ran out of time, a scheduled fault
	// did not happen).
	JudgedUnknown Judgement = "UNKNOWN"
	// JudgedFail: a violation that is not the hazard.
	JudgedFail Judgement = "FAIL"
	// JudgedNA: nothing to check in this run (the reason is the result's
	// summary). Never a PASS; it leaves the overall verdict to the other
	// properties.
	JudgedNA Judgement = "N/A"
)

func (j Judgement) rank() int {
	switch j {
	case JudgedHazard:
		return 1
	case JudgedUnknown:
		return 2
	case JudgedFail:
		return 3
	}
	return 0
}

// WorstJudgement returns the worst of js (PASS when empty): FAIL over
// UNKNOWN over HAZARD over PASS.
func WorstJudgement(js ...Judgement) Judgement {
	w := JudgedPass
	for _, j := range js {
		if j.rank() > w.rank() {
			w = j
		}
	}
	return w
}

// Overall is the verdict of a run or a check whose properties were judged
// js: the worst of them, except that a run in which every property had
// nothing to check (all N/A) checked nothing, which is UNKNOWN, never PASS.
// coordtorture run and fencecheck decide with it, so they agree.
func Overall(js ...Judgement) Judgement {
	if len(js) > 0 && !slices.ContainsFunc(js, func(j Judgement) bool { return j != JudgedNA }) {
		return JudgedUnknown
	}
	return WorstJudgement(js...)
}

// ExitStatus is the exit status of a run or a check whose worst judgement is
// j: 0 for PASS and HAZARD (a documented hazard observed, with its
// evidence), 1 for FAIL, 2 for UNKNOWN.
func (j Judgement) ExitStatus() int {
	switch j {
	case JudgedFail:
		return 1
	case JudgedUnknown:
		return 2
	}
	return 0
}

// OngoingFor is how long after an ongoing effect (Effect.Ongoing) was
// observed its loss may still strike: a deposed primary keeps taking writes
// until it is demoted, which the sentinels do on their INFO period (10s) once
// they reach it, a cluster node once gossip tells it. Beyond it, the effect
// explains nothing new.
const OngoingFor = 15 * time.Second

// Judge decides property p's verdict from its checker's result r and the
// history's proven fault effects (Effects, in time order): PASS or UNKNOWN as
// the checker said, and for a violation HAZARD when p may show the hazard,
// every violation is of a hazard kind that a proven effect can explain
// (Effect.Kinds: an evicted lease explains overlaps, not token regressions),
// none was complete before the first such effect's fault began, and, for a
// checker that reports where its violations lie (Result.Reaches: rate
// limits, overlaps, over-capacity, latches), each run of them lies within
// one such effect's reach (state made before the loss ended, Effect.Until;
// spans that can end after its fault began and that start within the
// horizon after that); FAIL otherwise, also when no fault was seen to have
// an effect. For a violation it marks the hazard evidence, puts
// the failures' evidence first and says in the summary how the violations
// split. Scenario runs and fencecheck decide with it, so they agree.
func Judge(p Property, r *Result, effects []Effect) Judgement {
	switch r.Verdict {
	case Fail:
		return judgeViolations(p, r, effects)
	case Unknown:
		return JudgedUnknown
	}
	return JudgedPass
}

func judgeViolations(p Property, r *Result, effects []Effect) Judgement {
	hz := p.HazardKinds()
	// faultStart is when the earliest fault with a proven effect that can
	// explain kind began (-1: none).
	faultStart := func(kind string) int64 {
		fs := int64(-1)
		for _, ef := range effects {
			if ef.Explains(kind) && (fs < 0 || ef.From < fs) {
				fs = ef.From
			}
		}
		return fs
	}
	// inReach: every run of the kind's violations (Result.Reaches) lies
	// within the reach of one effect that can explain the kind: spans that
	// can end after its fault began, on state made (a key granted, a lease
	// or permit held) before the loss ended (Effect.Until: when the effect
	// was observed, or for an ongoing loss such as a failover when the
	// deposed primary was seen demoted, else OngoingFor after; state made
	// or last proven at that very instant may precede it: equal times are
	// concurrent) and starting no later than the horizon after that — no
	// later than the loss's end itself for a Fresh reach (rate limits) and
	// an effect that is not ongoing: such spans hold only grants that read
	// state written after the loss.
	inReach := func(kind string) bool {
		for _, x := range r.Reaches {
			if x.Kind != kind {
				continue
			}
			if !slices.ContainsFunc(effects, func(ef Effect) bool {
				if !ef.Explains(kind) || addSat(x.First, x.Len) < ef.From {
					return false // another kind's effect, or complete before the fault began
				}
				at := ef.Until()
				horizon := x.Horizon
				if x.Fresh && !ef.Ongoing {
					// Rule: spans starting after a loss that ended read
					// only state written after it (Reach.Fresh).
					horizon = 0
				}
				return x.Since <= at && x.Last <= addSat(at, horizon)
			}) {
				return false
			}
		}
		return true
	}
	// Each kind is judged once (its reaches against every effect).
	reached := make(map[string]bool, len(r.Kinds))
	hazard := make(map[string]bool, len(r.Kinds))
	started := make(map[string]int64, len(r.Kinds))
	for kind := range r.Kinds {
		reached[kind] = inReach(kind)
		started[kind] = faultStart(kind)
		// A violation whose time is unknown cannot be shown to follow the
		// fault: FAIL.
		e, ok := r.Earliest[kind]
		hazard[kind] = started[kind] >= 0 && slices.Contains(hz, kind) && ok && e != history.Never && e >= started[kind] && reached[kind]
	}
	v := JudgedHazard
	if len(hz) == 0 || len(r.Kinds) == 0 {
		v = JudgedFail
	}
	var parts []string
	kinds := slices.Sorted(maps.Keys(r.Kinds))
	for _, k := range kinds {
		class := "FAIL"
		if hazard[k] {
			class = "hazard"
		} else {
			v = JudgedFail
			switch {
			case slices.Contains(hz, k) && started[k] >= 0 && reached[k]:
				class = "FAIL: before the fault that had an effect"
			case slices.Contains(hz, k) && started[k] >= 0:
				class = "FAIL: beyond the reach of every fault that had an effect"
			case slices.Contains(hz, k) && len(effects) > 0:
				class = "FAIL: no fault had an effect that explains it"
			case slices.Contains(hz, k):
				class = "FAIL: no fault was seen to have an effect"
			}
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s)", r.Kinds[k], k, class))
	}
	for k := range r.Evidence {
		r.Evidence[k].Hazard = hazard[r.Evidence[k].Kind]
	}
	slices.SortStableFunc(r.Evidence, func(a, b Evidence) int {
		switch {
		case a.Hazard == b.Hazard:
			return 0
		case b.Hazard:
			return -1
		default:
			return 1
		}
	})
	if len(parts) > 0 && len(r.Evidence) > 0 {
		first := r.Evidence[0].Msg
		if r.Evidence[0].Key != "" {
			first = fmt.Sprintf("key %q: %s", r.Evidence[0].Key, first)
		}
		r.Summary = fmt.Sprintf("%s: %s; first: %s", Plural(r.Violations, "violation"), strings.Join(parts, ", "), first)
	}
	return v
}

// HazardOutcome says, for a run with a property that may show a hazard,
// whether it did: "shown" when a property is HAZARD, "failed" when a
// property FAILed instead (a violation the hazard does not explain), "no
// effect" when no fault was observed to have the effect the hazard needs,
// "not shown" when it had and every property held; "" when no property may
// show a hazard.
func HazardOutcome(props []Property, js []Judgement, effects []Effect) string {
	if !slices.ContainsFunc(props, func(p Property) bool { return p.Expect == MayHazard }) {
		return ""
	}
	switch {
	case slices.Contains(js, JudgedHazard):
		return "shown"
	case slices.Contains(js, JudgedFail):
		return "failed"
	case len(effects) == 0:
		return "no effect"
	}
	return "not shown"
}

// Deciding lists the implementations of a run whose verdicts decide its
// overall verdict: stated when not nil (a report's "overall_from"), else
// prim alone when prim ran beside others (the peer libraries and the mutants
// run for comparison), else every implementation in impls. coordtorture's
// report and fencecheck over a run's histories both decide with it.
func Deciding(stated, impls []string) []string {
	switch {
	case stated != nil:
		return stated
	case len(impls) > 1 && slices.Contains(impls, "prim"):
		return []string{"prim"}
	}
	return impls
}

// HistoryName is the file name of a run's history of scenario by impl on
// build, in the run's histories/ directory ("/" in a scenario's name is
// "__").
func HistoryName(scenario, impl, build string) string {
	return strings.ReplaceAll(scenario, "/", "__") + "." + impl + "." + build + ".jsonl.gz"
}
