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

// TestRWVerifyMutantFails: a verification that answers "held" without
// asking tells a holder that stalled past its lease that it still holds it:
// lease-protocol FAILs rwlock/pause-client with a proof after the lease
// certainly ended (review: such a mutant passed, no checker read the rw
// answers), where the reference and prim pass.
func TestRWVerifyMutantFails(t *testing.T) {
	var lp *scenarios.PropertyResult
	for seed := int64(1); seed <= 3 && (lp == nil || lp.Verdict == scenarios.Pass); seed++ {
		out := runScenarioSeed(t, "rwlock/pause-client", "mutant-rw-verify-always-true", seed)
		lp = nil
		for k := range out.Results {
			if out.Results[k].Checker == "lease-protocol" {
				lp = &out.Results[k]
			}
		}
	}
	if lp == nil || lp.Verdict != scenarios.Fail || lp.Result.Kinds["after-end"] == 0 {
		t.Fatalf("mutant-rw-verify-always-true on rwlock/pause-client: not flagged with a proof after the lease ended: %+v", lp)
	}
	for _, impl := range []string{"reference-rw-lease", "prim"} {
		if out := runScenario(t, "rwlock/pause-client", impl); out.Verdict != scenarios.Pass {
			t.Fatalf("%s on rwlock/pause-client: %s, want PASS", impl, out.Verdict)
		}
	}
}

// TestRWMutantFailsInHazardScenario: in a scenario whose clock jump can
// admit a writer beside a live holder (HAZARD for a correct lease), a
// mutant's overlaps from the start, before any jump, are not the hazard:
// FAIL.
func TestRWMutantFailsInHazardScenario(t *testing.T) {
	out := runScenario(t, "rwlock/clock-skew", "mutant-rw-writer-ignores-readers")
	rw := scenarios.Pass
	for _, r := range out.Results {
		if r.Checker == "rw-exclusion" {
			rw = r.Verdict
		}
	}
	// (lease-protocol may show the jump's own hazard beside it.)
	if out.Verdict != scenarios.Fail || rw != scenarios.Fail {
		t.Fatalf("verdict %s, rw-exclusion %s: want FAIL, the overlaps before the clock jump are no hazard", out.Verdict, rw)
	}
}
