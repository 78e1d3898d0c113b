package mutants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/scenarios/mutants"
)

func init() {
	// The correct semaphore the release mutant breaks: the same atomic
	// acquisition, an owner-checked release.
	scenarios.RegisterSemImpl(mutants.SemRelease{OwnerChecked: true})
}

// TestSemaphoreMutantsFail: each semaphore mutant admits more than the
// capacity in semaphore/baseline (FAIL, with the over-capacity instant as
// evidence), where the correct implementation beside it and prim pass.
func TestSemaphoreMutantsFail(t *testing.T) {
	for _, tc := range []struct {
		scenario, mutant string
		correct          []string
	}{
		{"semaphore/baseline", "mutant-semaphore-prune-not-atomic", []string{"prim"}},
		{"semaphore/pause-client", "mutant-semaphore-release-without-owner-check", []string{"reference-semaphore-owner-checked-release"}},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			// An over-admission needs the timing it needs (a release after
			// the releaser's own permit expired, with the semaphore full):
			// up to three seeds, one FAIL suffices.
			var sem *scenarios.PropertyResult
			for seed := int64(1); seed <= 3 && (sem == nil || sem.Verdict != scenarios.Fail); seed++ {
				out := runSemScenario(t, tc.scenario, tc.mutant, seed)
				sem = nil
				for k := range out.Results {
					if out.Results[k].Checker == "semaphore" {
						sem = &out.Results[k]
					}
				}
			}
			if sem == nil || sem.Verdict != scenarios.Fail || len(sem.Result.Evidence) == 0 ||
				!strings.Contains(sem.Result.Evidence[0].Msg, "permits held at") {
				t.Fatalf("%s on %s: the mutant was not flagged: %+v", tc.mutant, tc.scenario, sem)
			}
			t.Logf("%s on %s: %s", tc.mutant, tc.scenario, sem.Result.Evidence[0].Msg)
			for _, impl := range tc.correct {
				if out := runSemScenario(t, tc.scenario, impl, 1); out.Verdict != scenarios.Pass {
					t.Fatalf("%s on %s: %s, want PASS", impl, tc.scenario, out.Verdict)
				}
			}
		})
	}
}

// TestSemaphoreRenewMutantFails: a semaphore whose renewal re-creates a
// released permit answers the holder's late keep-alive "renewed" and its
// verification "held" after the release: lease-protocol FAILs
// semaphore/baseline with a proof after the permit was released (before
// issue 30 no checker read the semaphore's answers), where the correct
// semaphore it breaks and prim pass.
func TestSemaphoreRenewMutantFails(t *testing.T) {
	var lp *scenarios.PropertyResult
	for seed := int64(1); seed <= 3 && (lp == nil || lp.Verdict != scenarios.Fail); seed++ {
		out := runSemScenario(t, "semaphore/baseline", "mutant-semaphore-renew-recreates", seed)
		lp = nil
		for k := range out.Results {
			if out.Results[k].Checker == "lease-protocol" {
				lp = &out.Results[k]
			}
		}
	}
	if lp == nil || lp.Verdict != scenarios.Fail || lp.Result.Kinds["after-end"] == 0 || len(lp.Result.Evidence) == 0 ||
		!strings.Contains(lp.Result.Evidence[0].Msg, "after it was released") {
		t.Fatalf("mutant-semaphore-renew-recreates on semaphore/baseline: not flagged with an answer after the release: %+v", lp)
	}
	t.Logf("mutant-semaphore-renew-recreates: %s", lp.Result.Evidence[0].Msg)
	for _, impl := range []string{"reference-semaphore-owner-checked-release", "prim"} {
		if out := runSemScenario(t, "semaphore/baseline", impl, 1); out.Verdict != scenarios.Pass {
			t.Fatalf("%s on semaphore/baseline: %s, want PASS", impl, out.Verdict)
		}
	}
}

// runSemScenario runs a semaphore scenario on a real server with impl and
// seed.
func runSemScenario(t *testing.T, name, impl string, seed int64) *scenarios.Outcome {
	t.Helper()
	ss, err := scenarios.Match([]string{name})
	if err != nil || len(ss) != 1 {
		t.Fatalf("%s: %v %v", name, ss, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: 4 * time.Second, Seed: seed, Impl: impl, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Results {
		t.Logf("%s %s (seed %d)/%s: %-7s %s", impl, name, seed, r.Checker, r.Verdict, r.Result.Summary)
	}
	return out
}

// TestNoExpiryKeptFails: a semaphore that gives a permit without expiry a
// lease fails semaphore/no-expiry-crash's no-expiry-kept check (the crashed
// holder's permit has a deadline on the server), where the same semaphore
// honouring NoExpiry passes it.
func TestNoExpiryKeptFails(t *testing.T) {
	kept := func(out *scenarios.Outcome) *scenarios.PropertyResult {
		for k := range out.Results {
			if out.Results[k].Checker == "no-expiry-kept" {
				return &out.Results[k]
			}
		}
		t.Fatal("no no-expiry-kept property")
		return nil
	}
	r := kept(runSemScenario(t, "semaphore/no-expiry-crash", "mutant-semaphore-no-expiry-expires", 1))
	if r.Verdict != scenarios.Fail || !strings.Contains(r.Result.Summary, "the deadline") {
		t.Fatalf("the mutant was not flagged: %s %s", r.Verdict, r.Result.Summary)
	}
	if r := kept(runSemScenario(t, "semaphore/no-expiry-crash", "reference-semaphore-owner-checked-release", 1)); r.Verdict != scenarios.Pass {
		t.Fatalf("the reference: %s %s", r.Verdict, r.Result.Summary)
	}
}
