package mutants_test

import (
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/scenarios"
)

// TestLatchMutantFails: a count-down that ignores the generation decrements
// the generation a reset put in place of its own; latch/reset-race, whose
// resets race the signals, must FAIL it (a late signal answered with a
// remaining count instead of -1, or a wait opened early), where prim passes.
func TestLatchMutantFails(t *testing.T) {
	const scenario = "latch/reset-race"
	out := runScenario(t, scenario, "mutant-latch-decrements-replaced-generation")
	var lr *scenarios.PropertyResult
	for k := range out.Results {
		if out.Results[k].Checker == "latch" {
			lr = &out.Results[k]
		}
	}
	if lr == nil || lr.Verdict != scenarios.Fail || len(lr.Result.Evidence) == 0 {
		t.Fatalf("the mutant was not flagged on %s: %+v", scenario, lr)
	}
	found := false
	for _, e := range lr.Result.Evidence {
		found = found || strings.Contains(e.Msg, "instead of -1") || strings.Contains(e.Msg, "had been invoked")
	}
	if !found {
		t.Fatalf("no evidence of a replaced generation's signal counted: %+v", lr.Result.Evidence)
	}
	if out := runScenario(t, scenario, "prim"); out.Verdict != scenarios.Pass {
		t.Fatalf("prim on %s: %s, want PASS", scenario, out.Verdict)
	}
}

// TestLatchWaitMutantFails: a wait that never re-reads without a
// notification (and gets none) answers long after its generation reached
// zero, or not at all: latch/baseline must FAIL it with a lost completion
// (stuck-waiter). prim passes latch/baseline in TestLatchScenarios.
func TestLatchWaitMutantFails(t *testing.T) {
	out := runScenario(t, "latch/baseline", "mutant-latch-wait-without-reread")
	for _, r := range out.Results {
		if r.Checker != "latch" {
			continue
		}
		if r.Verdict != scenarios.Fail || len(r.Result.Evidence) == 0 || r.Result.Evidence[0].Kind != models.KindStuckWaiter ||
			!strings.Contains(r.Result.Evidence[0].Msg, "lost completion") {
			t.Fatalf("the mutant was not flagged with a lost completion: %s %+v", r.Verdict, r.Result.Evidence)
		}
		return
	}
	t.Fatal("no latch property")
}

// TestLatchCountDownTwiceMutantFails: a count-down that can apply twice (a
// resent signal) answers a remaining count below what the signals invoked
// allow: latch/baseline must FAIL it with latch-decremented-twice, whose
// evidence says the count-down "decremented more than once". prim passes
// latch/baseline in TestLatchScenarios.
func TestLatchCountDownTwiceMutantFails(t *testing.T) {
	out := runScenario(t, "latch/baseline", "mutant-latch-count-down-applies-twice")
	for _, r := range out.Results {
		if r.Checker != "latch" {
			continue
		}
		if r.Verdict != scenarios.Fail || r.Result.Kinds[models.KindLatchDecrementedTwice] == 0 {
			t.Fatalf("the mutant was not flagged with %s: %s %v %s", models.KindLatchDecrementedTwice, r.Verdict, r.Result.Kinds, r.Result.Summary)
		}
		for _, e := range r.Result.Evidence {
			if e.Kind == models.KindLatchDecrementedTwice && strings.Contains(e.Msg, "decremented more than once") {
				return
			}
		}
		t.Fatalf("no evidence names the double decrement: %+v", r.Result.Evidence)
	}
	t.Fatal("no latch property")
}
