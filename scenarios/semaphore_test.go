package scenarios_test

import (
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/scenarios"
)

// semHazards are the semaphore scenarios whose fault may lose or expire
// live permits (over-capacity is their hazard, with its proven effect);
// whether a run shows it depends on where the fault falls among the
// holders, so PASS ("hazard not shown") is allowed too.
var semHazards = map[string]bool{
	"semaphore/kill-restart-noaof": true,
	"semaphore/failover-forced":    true,
	"semaphore/clock-skew":         true,
}

// TestSemaphoreScenarios runs every semaphore scenario briefly with prim:
// the capacity must hold where it must, a HAZARD only with a proven effect
// and over-capacity evidence marked as the hazard, never a FAIL or an
// UNKNOWN (lease-protocol's hazard: a lost permit denied to its holder);
// every property but the hazards' PASSes, and the run reports
// prim's abandoned clean-ups.
func TestSemaphoreScenarios(t *testing.T) {
	ss, _ := scenarios.Match([]string{"semaphore"})
	if len(ss) != 8 {
		t.Fatalf("the semaphore family has %d scenarios, want 8", len(ss))
	}
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) {
			d := duration()
			if s.Name == "semaphore/partition-client" {
				d = semPartitionRun
			}
			out := runFor(t, s.Name, "prim", 1, d)
			if out.Verdict == scenarios.Fail || out.Verdict == scenarios.Unknown {
				t.Fatalf("%s: %s %s", s.Name, out.Verdict, out.Error)
			}
			if out.Ops < 50 {
				t.Fatalf("only %d operations: the workload did not run", out.Ops)
			}
			if _, ok := out.Counters["prim.cleanup.abandoned"]; !ok {
				t.Fatalf("%s: no prim.cleanup.abandoned count in the outcome: %v", s.Name, out.Counters)
			}
			t.Logf("counters %v", out.Counters)
			if s.Name == "semaphore/partition-client" {
				requireAbandoned(t, out)
			}
			for _, r := range out.Results {
				switch {
				case r.Verdict == scenarios.Pass:
				case r.Verdict == scenarios.NA && r.Checker == "leaks" && s.NoLeakScan != "":
				case r.Verdict == scenarios.Hazard && r.Checker == "semaphore" && semHazards[s.Name]:
					for _, e := range r.Result.Evidence {
						if !e.Hazard || e.Kind != "over-capacity" || len(e.Ops) == 0 {
							t.Fatalf("%s: the hazard's evidence is not an over-capacity instant marked as the hazard: %+v", s.Name, e)
						}
					}
				case r.Verdict == scenarios.Hazard && r.Checker == "lease-protocol" && semHazards[s.Name]:
					// A lost permit answers "not held" to its holder.
					for _, e := range r.Result.Evidence {
						if !e.Hazard || e.Kind != "wrongly-denied" || len(e.Ops) == 0 {
							t.Fatalf("%s: the hazard's evidence is not a lost permit's denial marked as the hazard: %+v", s.Name, e)
						}
					}
				default:
					t.Fatalf("%s: %s is %s (%s)", s.Name, r.Checker, r.Verdict, r.Result.Summary)
				}
			}
			checkHazardAccounted(t, s, out)
			if s.Name == "semaphore/no-expiry-crash" {
				// The crash happened and its permit without expiry stayed; the
				// leak scan does not count it.
				if v := verdictOf(out, "no-expiry-kept"); v != scenarios.Pass {
					t.Fatalf("no-expiry-kept is %s", v)
				}
				for _, r := range out.Results {
					if r.Checker == "no-expiry-kept" && !strings.Contains(r.Result.Summary, "crashed holding") {
						t.Fatalf("no-expiry-kept does not show the crash: %s", r.Result.Summary)
					}
				}
			}
		})
	}
}

// TestSemaphoreImplsOnlyOnSemaphores: the semaphore scenarios run prim and
// the semaphore mutants, nothing else; a semaphore mutant runs no lock or
// rate limiter scenario. Refused, never a fake PASS.
func TestSemaphoreImplsOnlyOnSemaphores(t *testing.T) {
	scenarios.RegisterSemImpl(fakeSem{})
	expectSupports(t, []supportCase{
		{"semaphore/baseline", "prim", true},
		{"semaphore/baseline", "sem-mutant-for-this-test", true},
		{"semaphore/baseline", "redislock", false},
		{"semaphore/baseline", "redis_rate", false},
		{"fenced-lock/baseline", "sem-mutant-for-this-test", false},
		{"hash-lease/baseline", "sem-mutant-for-this-test", false},
		{"ratelimit/fixed/baseline", "sem-mutant-for-this-test", false},
	})
	if err := scenarios.ValidImpl("sem-mutant-for-this-test"); err != nil {
		t.Error(err)
	}
}

type fakeSem struct{ scenarios.SemImpl }

func (fakeSem) Name() string { return "sem-mutant-for-this-test" }

// semPartitionRun is how long semaphore/partition-client runs in the tests:
// its cuts last 5s (from 0.5s in), so a run needs 6.2s for one (its
// schedule window, less scenarios.ScheduleMargin, holds the cut and heal).
const semPartitionRun = 7 * time.Second

// requireAbandoned: semaphore/partition-client's cuts outlast a release, its
// owner-token follow-up, Close and the clean-up's attempt in the run's
// window, so a background clean-up gives up and the run counts it
// (prim.cleanup.abandoned > 0) — the counter can be non-zero, and a run
// reports it. Whether the cut client was releasing or acquiring early
// enough in the cut depends on the seed: up to two more seeds are tried.
func requireAbandoned(t *testing.T, out *scenarios.Outcome) {
	t.Helper()
	for seed := int64(2); out.Counters["prim.cleanup.abandoned"] == 0; seed++ {
		if seed > 3 {
			t.Fatalf("semaphore/partition-client: no background clean-up gave up at seeds 1–3: %v", out.Counters)
		}
		out = runFor(t, "semaphore/partition-client", "prim", seed, semPartitionRun)
		if out.Verdict == scenarios.Fail || out.Verdict == scenarios.Unknown {
			t.Fatalf("semaphore/partition-client seed %d: %s %s", seed, out.Verdict, out.Error)
		}
	}
	t.Logf("abandoned clean-ups counted: %v", out.Counters)
}
