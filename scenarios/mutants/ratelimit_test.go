package mutants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/scenarios/mutants"
)

func init() {
	// The correct sliding window the backward-rounding mutant breaks: the
	// same script, timestamps rounded forward (as prim does).
	scenarios.RegisterLimiterImpl(mutants.SlidingWindow{})
	// The correct bucket the client-clock and uncapped mutants break: the
	// same script on the server's TIME, capped at its burst.
	scenarios.RegisterLimiterImpl(mutants.TokenBucket{})
}

// runScenario runs a ratelimit scenario on a real server with impl.
func runScenario(t *testing.T, name, impl string) *scenarios.Outcome {
	t.Helper()
	return runScenarioSeed(t, name, impl, 1)
}

// runScenarioSeed is runScenario with a seed.
func runScenarioSeed(t *testing.T, name, impl string, seed int64) *scenarios.Outcome {
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
		t.Logf("%s %s/%s: %-7s %s", impl, name, r.Checker, r.Verdict, r.Result.Summary)
	}
	return out
}

// TestLimiterMutantsFail: each rate limiter mutant breaks its algorithm's
// bound (FAIL, with an over-limit span as evidence) or its availability
// (wrongly-limited: a denial its state had to grant) in a scenario of that
// algorithm, where prim and the correct implementation beside the mutant
// pass.
func TestLimiterMutantsFail(t *testing.T) {
	for _, tc := range []struct {
		scenario, mutant string
		correct          []string
		kind, evidence   string
	}{
		{"ratelimit/fixed/baseline", "mutant-limiter-client-clock", []string{"ulule", "prim"}, models.KindOverLimit, "granted within"},
		{"ratelimit/fixed/baseline", "mutant-limiter-read-then-write", nil, models.KindOverLimit, "granted within"},
		{"ratelimit/sliding/baseline", "mutant-sliding-rounds-backward", []string{"reference-sliding-rounds-forward", "prim"}, models.KindOverLimit, "granted within"},
		// The processes' clocks disagree by up to three quarters of a period.
		{"ratelimit/bucket/baseline", "mutant-bucket-client-clock", []string{"reference-bucket", "redis_rate", "prim"}, models.KindOverLimit, "granted within"},
		// Idle gaps fill an uncapped bucket past its burst.
		{"ratelimit/bucket/bursts", "mutant-bucket-no-cap", []string{"reference-bucket", "redis_rate", "prim"}, models.KindOverLimit, "granted within"},
		{"ratelimit/fixed/bursts", "mutant-limiter-never-refills", []string{"ulule", "prim"}, models.KindWronglyLimited, "did not refill"},
		{"ratelimit/fixed/baseline", "mutant-limiter-never-refills", nil, models.KindWronglyLimited, "did not refill"},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			// A sliding window rounding backward over-admits only when grants
			// fall between window − segment and the window apart, which one
			// short run on a loaded machine may not give (CI: 1330 requests,
			// none so): one of three seeds must show it.
			var rl *scenarios.PropertyResult
			seed := int64(1)
			for ; seed <= 3; seed++ {
				out := runScenarioSeed(t, tc.scenario, tc.mutant, seed)
				rl = nil
				for k := range out.Results {
					if out.Results[k].Checker == "rate-limit" {
						rl = &out.Results[k]
					}
				}
				if rl == nil || rl.Verdict != scenarios.Pass {
					break
				}
			}
			if rl == nil || rl.Verdict != scenarios.Fail || len(rl.Result.Evidence) == 0 || rl.Result.Kinds[tc.kind] == 0 ||
				!strings.Contains(rl.Result.Evidence[0].Msg, tc.evidence) {
				t.Fatalf("%s on %s: the mutant was not flagged: %+v", tc.mutant, tc.scenario, rl)
			}
			// The correct ones pass the seed that flagged the mutant.
			for _, impl := range tc.correct {
				if out := runScenarioSeed(t, tc.scenario, impl, seed); out.Verdict != scenarios.Pass {
					t.Fatalf("%s on %s (seed %d): %s, want PASS", impl, tc.scenario, seed, out.Verdict)
				}
			}
		})
	}
}

// TestLimiterMutantFailsInHazardScenario: in a scenario whose restarts lose
// grants (HAZARD for a correct limiter), a mutant's over-admission from the
// start, before any restart, is not the hazard: FAIL.
func TestLimiterMutantFailsInHazardScenario(t *testing.T) {
	out := runScenario(t, "ratelimit/fixed/kill-restart-noaof", "mutant-limiter-client-clock")
	if out.Verdict != scenarios.Fail || out.Hazard != "failed" {
		t.Fatalf("verdict %s, hazard %q: want FAIL, the violations before the first restart are no hazard", out.Verdict, out.Hazard)
	}
}

// TestBucketClientClockFailsInClockSkew: in the bucket's clock-skew scenario
// (a forward jump of the server's clock, whose over-admission is the
// hazard), a bucket that refills on its clients' clocks over-admits from
// the start, before any jump: FAIL, never the hazard.
func TestBucketClientClockFailsInClockSkew(t *testing.T) {
	out := runScenario(t, "ratelimit/bucket/clock-skew", "mutant-bucket-client-clock")
	if out.Verdict != scenarios.Fail || out.Hazard != "failed" {
		t.Fatalf("verdict %s, hazard %q: want FAIL, the over-admission before the jump is no hazard", out.Verdict, out.Hazard)
	}
}
