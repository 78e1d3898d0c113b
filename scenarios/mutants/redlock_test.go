package mutants_test

import (
	"fmt"
	"testing"

	"github.com/coordtorture/coordtorture/scenarios"
)

// TestRedlockMutantsFail: each Redlock mutant is flagged where its broken
// rule matters, and the reference it derives from, like prim, passes the
// same scenario. A client cut off from a majority of the nodes (silently:
// its commands there time out) "acquires" on the one node it reaches when
// a timed-out node counts as a success, and keeps a lease the others take
// when a renewal on a minority counts: two holders (exclusion, FAIL).
// Forgetting the drift allowance claims more validity than ttl − drift on
// every acquisition (redlock-validity, FAIL), and forgetting the time the
// acquisition took claims more than ttl − elapsed − drift where a round
// trip takes 80ms (redlock/latency; redlock-validity, FAIL). Whether a cut
// catches a renewal depends on the seed: up to three are tried.
func TestRedlockMutantsFail(t *testing.T) {
	for _, c := range []struct{ mutant, scenario, checker string }{
		{"mutant-redlock-timeout-counts-as-success", "redlock/partition-client", "exclusion"},
		{"mutant-redlock-renews-on-minority", "redlock/partition-client", "exclusion"},
		{"mutant-redlock-ignores-drift", "redlock/baseline", "redlock-validity"},
		{"mutant-redlock-ignores-elapsed", "redlock/latency", "redlock-validity"},
	} {
		t.Run(c.mutant, func(t *testing.T) {
			var flagged *scenarios.PropertyResult
			for seed := int64(1); seed <= 3 && flagged == nil; seed++ {
				out := runScenarioSeed(t, c.scenario, c.mutant, seed)
				for k := range out.Results {
					if r := &out.Results[k]; r.Checker == c.checker && r.Verdict == scenarios.Fail && len(r.Result.Evidence) > 0 {
						flagged = r
					}
				}
			}
			if flagged == nil {
				t.Fatalf("%s on %s: %s never FAILed in three seeds", c.mutant, c.scenario, c.checker)
			}
			t.Logf("flagged: %s", flagged.Result.Summary)
		})
	}
	// prim passes them in the scenarios package's tests. The reference
	// passes the baseline, the latency, and the cut on three seeds (before
	// it declared that a failed renewal surrenders the lease, seeds 2 and 3
	// FAILed here: the checker held it to the lease it had just given up).
	t.Run("reference-redlock redlock/baseline", func(t *testing.T) {
		if out := runScenario(t, "redlock/baseline", "reference-redlock"); out.Verdict != scenarios.Pass {
			t.Fatalf("reference-redlock on redlock/baseline: %s, want PASS", out.Verdict)
		}
	})
	t.Run("reference-redlock redlock/latency", func(t *testing.T) {
		if out := runScenario(t, "redlock/latency", "reference-redlock"); out.Verdict != scenarios.Pass {
			t.Fatalf("reference-redlock on redlock/latency: %s, want PASS", out.Verdict)
		}
	})
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("reference-redlock redlock/partition-client seed %d", seed), func(t *testing.T) {
			if out := runScenarioSeed(t, "redlock/partition-client", "reference-redlock", seed); out.Verdict != scenarios.Pass {
				t.Fatalf("reference-redlock on redlock/partition-client, seed %d: %s, want PASS", seed, out.Verdict)
			}
		})
	}
}
