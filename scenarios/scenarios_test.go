package scenarios_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed"
)

func duration() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("COORDTORTURE_SCENARIO_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 4 * time.Second
}

func build() string {
	if m := testbed.Matrix(); len(m) == 1 {
		return m[0]
	}
	return testbed.DefaultBuild
}

func run(t *testing.T, name, impl string, seed int64) *scenarios.Outcome {
	t.Helper()
	ss, err := scenarios.Match([]string{name})
	if err != nil || len(ss) != 1 {
		t.Fatalf("%s: %v %v", name, ss, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: duration(), Seed: seed, Impl: impl, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Results {
		t.Logf("%s %s/%s: %-7s %s", impl, name, r.Checker, r.Verdict, r.Result.Summary)
		for _, e := range r.Result.Evidence {
			if len(e.Msg) > 0 {
				t.Logf("    %s", e.Msg)
				break
			}
		}
	}
	return out
}

func verdictOf(out *scenarios.Outcome, checker string) scenarios.Verdict {
	for _, r := range out.Results {
		if r.Checker == checker {
			return r.Verdict
		}
	}
	return ""
}

// TestFencedLockScenarios runs every fenced-lock scenario briefly with prim and
// requires its must-hold properties to hold.
func TestFencedLockScenarios(t *testing.T) {
	ss, _ := scenarios.Match([]string{"fenced-lock"})
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) {
			out := run(t, s.Name, "prim", 1)
			if out.Verdict == scenarios.Fail || out.Verdict == scenarios.Unknown {
				t.Fatalf("%s: %s", s.Name, out.Verdict)
			}
			if out.Ops < 50 {
				t.Fatalf("only %d operations: the workload did not run", out.Ops)
			}
			// The documented hazards must actually be produced, with evidence.
			wantHazard := map[string]string{
				"fenced-lock/failover-forced":    "token-order",
				"fenced-lock/kill-restart-noaof": "token-order",
			}[s.Name]
			if wantHazard != "" && verdictOf(out, wantHazard) != scenarios.Hazard {
				t.Fatalf("%s: %s is %s; the scenario must show the hazard", s.Name, wantHazard, verdictOf(out, wantHazard))
			}
		})
	}
}

// TestWaitingLockScenarios runs the waiting-lock family briefly: every
// must-hold property, liveness included, must hold.
func TestWaitingLockScenarios(t *testing.T) {
	ss, _ := scenarios.Match([]string{"waiting-lock"})
	if len(ss) < 2 {
		t.Fatalf("waiting-lock family has %d scenarios", len(ss))
	}
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) {
			out := run(t, s.Name, "prim", 1)
			if out.Verdict == scenarios.Fail || out.Verdict == scenarios.Unknown {
				t.Fatalf("%s: %s", s.Name, out.Verdict)
			}
			if verdictOf(out, "liveness") != scenarios.Pass {
				t.Fatalf("liveness %s", verdictOf(out, "liveness"))
			}
		})
	}
}

// TestHashLeaseScenarios: exclusion per field must hold (on a build with
// hash-field expiry; the default build has it).
func TestHashLeaseScenarios(t *testing.T) {
	ss, _ := scenarios.Match([]string{"hash-lease"})
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) {
			out := run(t, s.Name, "prim", 1)
			if out.Verdict != scenarios.Pass {
				t.Fatalf("%s: %s", s.Name, out.Verdict)
			}
			if out.Ops < 50 {
				t.Fatalf("only %d operations", out.Ops)
			}
		})
	}
}

// TestUnfencedPeerIsCaught runs the pause-client scenario on redislock, whose
// resource cannot refuse stale writers: the oracle must report stale writes.
func TestUnfencedPeerIsCaught(t *testing.T) {
	out := run(t, "fenced-lock/pause-client", "redislock", 1)
	if v := verdictOf(out, "fenced-resource"); v != scenarios.Fail {
		t.Fatalf("redislock under client pauses: fenced-resource %s, want FAIL (stale writes accepted)", v)
	}
	for _, r := range out.Results {
		if r.Checker == "fenced-resource" && (len(r.Result.Evidence) == 0 || !strings.Contains(r.Result.Evidence[0].Msg, "stale")) {
			t.Fatalf("evidence does not name a stale write: %+v", r.Result.Evidence)
		}
	}
}
