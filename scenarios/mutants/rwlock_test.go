package mutants_test

import (
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/scenarios/mutants"
)

func init() {
	// The correct read-write lease the mutants break: the same scripts,
	// every rule kept.
	scenarios.RegisterRWImpl(mutants.RWLease{})
}

// TestRWMutantsFail: each read-write lease mutant admits a writer beside a
// live holder in rwlock/baseline (FAIL, with an overlap of a writer's
// validity window as evidence), where the correct implementation beside the
// mutants and prim pass.
func TestRWMutantsFail(t *testing.T) {
	for _, mutant := range []string{"mutant-rw-writer-ignores-readers", "mutant-rw-release-without-owner-check"} {
		t.Run(mutant, func(t *testing.T) {
			out := runScenario(t, "rwlock/baseline", mutant)
			var rw *scenarios.PropertyResult
			for k := range out.Results {
				if out.Results[k].Checker == "rw-exclusion" {
					rw = &out.Results[k]
				}
			}
			if rw == nil || rw.Verdict != scenarios.Fail || out.Verdict != scenarios.Fail || len(rw.Result.Evidence) == 0 ||
				!strings.Contains(rw.Result.Evidence[0].Msg, "validity windows overlap") || len(rw.Result.Evidence[0].Ops) == 0 {
				t.Fatalf("%s on rwlock/baseline: the mutant was not flagged: %+v", mutant, rw)
			}
		})
	}
	for _, impl := range []string{"reference-rw-lease", "prim"} {
		t.Run(impl, func(t *testing.T) {
			if out := runScenario(t, "rwlock/baseline", impl); out.Verdict != scenarios.Pass {
				t.Fatalf("%s on rwlock/baseline: %s, want PASS", impl, out.Verdict)
			}
		})
	}
}

// TestRWMutantFailsInHazardScenario: in a scenario whose clock jump can
// admit a writer beside a live holder (HAZARD for a correct lease), a
// mutant's overlaps from the start, before any jump, are not the hazard:
// FAIL.
func TestRWMutantFailsInHazardScenario(t *testing.T) {
	out := runScenario(t, "rwlock/clock-skew", "mutant-rw-writer-ignores-readers")
	if out.Verdict != scenarios.Fail || out.Hazard != "failed" {
		t.Fatalf("verdict %s, hazard %q: want FAIL, the overlaps before the clock jump are no hazard", out.Verdict, out.Hazard)
	}
}
