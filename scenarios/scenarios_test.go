package scenarios_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
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
	return runFor(t, name, impl, seed, duration())
}

// runFor is run for d (a scenario whose faults need a longer run than the
// tests' default).
func runFor(t *testing.T, name, impl string, seed int64, d time.Duration) *scenarios.Outcome {
	t.Helper()
	return runConfig(t, name, scenarios.Config{Duration: d, Seed: seed, Impl: impl})
}

// runConfig is runFor with more of the run's settings (cfg.TTL); the build
// and the log are the tests'.
func runConfig(t *testing.T, name string, cfg scenarios.Config) *scenarios.Outcome {
	t.Helper()
	ss, err := scenarios.Match([]string{name})
	if err != nil || len(ss) != 1 {
		t.Fatalf("%s: %v %v", name, ss, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg.Build, cfg.Logf = build(), t.Logf
	impl, d := cfg.Impl, cfg.Duration
	out, err := scenarios.Run(ctx, ss[0], cfg)
	if err != nil {
		t.Fatal(err)
	}
	if progressUnjudged(out) {
		// A loaded machine (CI beside other work) may complete fewer than the
		// progress check's 20 operations of one kind in a short run's healthy
		// periods: UNKNOWN, honestly. Run it once more, twice as long; an
		// UNKNOWN then stands.
		t.Logf("%s %s: progress could not be judged in %v; running it again for %v", impl, name, d, 2*d)
		cfg.Duration = 2 * d
		out, err = scenarios.Run(ctx, ss[0], cfg)
		if err != nil {
			t.Fatal(err)
		}
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

// progressUnjudged reports whether the outcome's only UNKNOWN is the
// progress check's "cannot be judged" (too few operations in its healthy
// periods) and nothing failed.
func progressUnjudged(out *scenarios.Outcome) bool {
	found := false
	for _, r := range out.Results {
		switch {
		case r.Verdict == scenarios.Fail:
			return false
		case r.Verdict != scenarios.Unknown:
		case r.Checker == "progress" && strings.Contains(r.Result.String(), "cannot be judged"):
			found = true
		default:
			return false
		}
	}
	return found
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
				"fenced-lock/failover-forced":           "token-order",
				"fenced-lock/kill-restart-noaof":        "token-order",
				"fenced-lock/failover-cluster-takeover": "token-order",
				"fenced-lock/failover-cluster-force":    "token-order",
				"fenced-lock/promote-replica":           "token-order",
				"fenced-lock/split-brain":               "token-order",
			}[s.Name]
			if wantHazard != "" && verdictOf(out, wantHazard) != scenarios.Hazard {
				t.Fatalf("%s: %s is %s; the scenario must show the hazard", s.Name, wantHazard, verdictOf(out, wantHazard))
			}
			checkHazardAccounted(t, s, out)
			t.Logf("uncertain: %+v", out.Uncertain)
			// The faults about uncertainty must make some: a lost reply is
			// an operation the client cannot judge.
			// slow-beyond-lease: a grant that arrives after its lease ended
			// is not returned as held (prim: uncertain).
			if (s.Name == "fenced-lock/lose-replies" || s.Name == "fenced-lock/black-hole" || s.Name == "fenced-lock/slow-beyond-lease") && out.Uncertain.Info == 0 {
				t.Fatalf("%s: no operation of unknown outcome: the fault had no effect", s.Name)
			}
		})
	}
}

// checkHazardAccounted requires a scenario with a may-show-hazard property to
// say what became of its hazard: shown (after a fault with a proven effect),
// not shown though the fault had its effect, or not shown because no fault
// was seen to have the effect. A HAZARD verdict always comes with the effect
// that explains it.
func checkHazardAccounted(t *testing.T, s *scenarios.Scenario, out *scenarios.Outcome) {
	t.Helper()
	may := false
	for _, p := range s.Properties {
		may = may || p.Expect == scenarios.MayHazard
	}
	switch {
	case !may && out.Hazard != "":
		t.Fatalf("%s has no may-show-hazard property but reports hazard %q", s.Name, out.Hazard)
	case may && out.Hazard == "":
		t.Fatalf("%s: the outcome does not say whether the hazard was shown", s.Name)
	case out.Verdict == scenarios.Hazard && (out.Hazard != "shown" || len(out.Effects) == 0):
		t.Fatalf("%s: HAZARD with hazard %q and effects %q: a hazard needs a proven fault effect", s.Name, out.Hazard, out.Effects)
	}
	t.Logf("hazard %q, effects %q", out.Hazard, out.Effects)
}

// TestHardenedClients runs a fault scenario with the clients' retries off
// (the variant; the tests above run go-redis's defaults, as users have them).
func TestHardenedClients(t *testing.T) {
	ss, _ := scenarios.Match([]string{"fenced-lock/lose-replies"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: duration(), Seed: 2, Hardened: true})
	if err != nil {
		t.Fatal(err)
	}
	if out.Verdict != scenarios.Pass {
		t.Fatalf("hardened: %s", out.Verdict)
	}
}

// TestMutantsOnlyWhereTheWorkloadDrivesThem: a workload that calls prim
// directly cannot test a mutant, so it refuses one instead of passing it; the
// waiting workload drives a mutant only if it can wait (a Waiter).
func TestMutantsOnlyWhereTheWorkloadDrivesThem(t *testing.T) {
	scenarios.RegisterImpl(fakeMutant{})
	scenarios.RegisterImpl(fakeWaitingMutant{})
	for _, tc := range []struct{ name, why string }{
		{"waiting-lock/handoff", "cannot wait"},
		{"waiting-lock/abandoned-holders", "cannot wait"},
		{"hash-lease/baseline", "calls prim directly"},
	} {
		ss, _ := scenarios.Match([]string{tc.name})
		if ss[0].Supports("mutant-for-this-test") {
			t.Errorf("%s accepts a mutant it cannot run", tc.name)
		}
		_, err := scenarios.Run(context.Background(), ss[0], scenarios.Config{Impl: "mutant-for-this-test"})
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	for _, name := range []string{"fenced-lock/baseline", "waiting-lock/handoff", "waiting-lock/abandoned-holders"} {
		ss, _ := scenarios.Match([]string{name})
		if !ss[0].Supports("waiting-mutant-for-this-test") {
			t.Errorf("%s refuses a mutant that can wait", name)
		}
	}
	ss, _ := scenarios.Match([]string{"fenced-lock/baseline"})
	if !ss[0].Supports("mutant-for-this-test") {
		t.Error("fenced-lock/baseline refuses a mutant")
	}
	ss, _ = scenarios.Match([]string{"hash-lease/baseline"})
	if ss[0].Supports("waiting-mutant-for-this-test") {
		t.Error("hash-lease/baseline accepts a mutant it cannot run")
	}
}

type fakeWaitingMutant struct{ scenarios.Waiter }

func (fakeWaitingMutant) Name() string { return "waiting-mutant-for-this-test" }

type fakeMutant struct{ scenarios.LockImpl }

func (fakeMutant) Name() string { return "mutant-for-this-test" }

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
			checkHazardAccounted(t, s, out)
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
			if out.Verdict == scenarios.NA && out.Unsupported != "" && !slices.Contains([]string{"redis-8.0", "redis-8.6", "valkey-9.1"}, out.Build) {
				// A build without hash-field expiry (redis-7.0,
				// valkey-8.1): N/A naming it (TestHashLeaseWithoutHashFieldExpiryIsNA).
				t.Skipf("%s on %s: %s", s.Name, out.Build, out.Unsupported)
			}
			if out.Verdict != scenarios.Pass {
				t.Fatalf("%s: %s", s.Name, out.Verdict)
			}
			if out.Ops < 50 && s.Name != "hash-lease/old-server" { // there every client stops at its refusal
				t.Fatalf("only %d operations", out.Ops)
			}
		})
	}
}

// TestUnfencedPeerIsCaught runs the pause-client scenario on each peer, whose
// resource cannot refuse stale writers: the oracle must report stale writes.
func TestUnfencedPeerIsCaught(t *testing.T) {
	for _, peer := range scenarios.Peers {
		t.Run(peer, func(t *testing.T) {
			out := run(t, "fenced-lock/pause-client", peer, 1)
			if v := verdictOf(out, "fenced-resource"); v != scenarios.Fail {
				t.Fatalf("%s under client pauses: fenced-resource %s, want FAIL (stale writes accepted)", peer, v)
			}
			for _, r := range out.Results {
				if r.Checker == "fenced-resource" && (len(r.Result.Evidence) == 0 || !strings.Contains(r.Result.Evidence[0].Msg, "stale")) {
					t.Fatalf("evidence does not name a stale write: %+v", r.Result.Evidence)
				}
			}
		})
	}
}

// TestRegistryComplete: every family the issue names is registered with the
// scenarios it lists, and each family has a test above that runs all of it.
func TestRegistryComplete(t *testing.T) {
	want := []string{
		"fenced-lock/baseline", "fenced-lock/partition-client", "fenced-lock/partition-primary", "fenced-lock/latency",
		"fenced-lock/pause-primary", "fenced-lock/pause-client", "fenced-lock/kill-restart-aof", "fenced-lock/kill-restart-noaof",
		"fenced-lock/failover-sentinel", "fenced-lock/failover-forced", "fenced-lock/clock-skew", "fenced-lock/eviction",
		"waiting-lock/handoff", "waiting-lock/lost-notifications", "waiting-lock/failover", "waiting-lock/abandoned-holders",
		"hash-lease/baseline", "hash-lease/partition", "hash-lease/expiry-race", "hash-lease/old-server",
		"fenced-lock/baseline-cluster", "fenced-lock/failover-cluster", "waiting-lock/handoff-cluster",
		"waiting-lock/failover-cluster", "hash-lease/baseline-cluster", "hash-lease/failover-cluster",
		"fenced-lock/lose-replies", "fenced-lock/reset-peer", "fenced-lock/black-hole", "fenced-lock/slow-replies", "fenced-lock/slow-beyond-lease",
		"fenced-lock/resource-partition", "fenced-lock/resource-slow", "fenced-lock/resource-restart",
		"fenced-lock/failover-cluster-takeover", "fenced-lock/failover-cluster-force", "fenced-lock/promote-replica",
		"fenced-lock/split-brain",
	}
	for _, algo := range []string{"fixed", "sliding", "bucket"} {
		for _, fault := range []string{"baseline", "partition-client", "latency", "pause-primary", "kill-restart-noaof",
			"failover-forced", "clock-skew", "clock-skew-back", "baseline-cluster", "bursts"} {
			want = append(want, "ratelimit/"+algo+"/"+fault)
		}
	}
	for _, fault := range []string{"baseline", "partition-client", "pause-client", "kill-restart-noaof",
		"failover-forced", "clock-skew", "no-expiry-crash", "baseline-cluster"} {
		want = append(want, "semaphore/"+fault)
	}
	for _, fault := range []string{"baseline", "lost-notifications", "reset-race", "failover-forced", "baseline-cluster"} {
		want = append(want, "latch/"+fault)
	}
	for _, fault := range []string{"baseline", "partition-client", "pause-client", "pause-primary", "failover-forced",
		"clock-skew", "baseline-cluster"} {
		want = append(want, "rwlock/"+fault)
	}
	for _, fault := range []string{"baseline", "baseline-five", "node-loss", "partition-minority", "partition-client",
		"slow-node", "latency", "clock-skew", "restart-without-persistence", "pause-client"} {
		want = append(want, "redlock/"+fault)
	}
	have := map[string]bool{}
	for _, s := range scenarios.All() {
		have[s.Name] = true
		family := s.Name[:strings.Index(s.Name, "/")]
		if family != "fenced-lock" && family != "waiting-lock" && family != "hash-lease" && family != "ratelimit" &&
			family != "semaphore" && family != "latch" && family != "rwlock" && family != "redlock" {
			t.Errorf("%s: family %q has no test that runs it", s.Name, family)
		}
		if s.Summary == "" || len(s.Properties) == 0 || s.Workload == nil {
			t.Errorf("%s: incomplete (summary, properties and workload are required)", s.Name)
		}
	}
	for _, n := range want {
		if !have[n] {
			t.Errorf("scenario %s is not registered", n)
		}
	}
	if ss, err := scenarios.Match([]string{"*-cluster"}); err != nil || len(ss) != 12 {
		t.Errorf("*-cluster matches %d scenarios, %v", len(ss), err)
	}
}

// TestSameSeedSameSchedule: a scenario's fault schedule is a function of the
// seed, the duration and the ttl.
func TestSameSeedSameSchedule(t *testing.T) {
	sched := func(s *scenarios.Scenario, seed uint64) string {
		var b strings.Builder
		for _, e := range s.Nemesis(rand.New(rand.NewPCG(seed, 0)), 30*time.Second, 500*time.Millisecond) {
			fmt.Fprintf(&b, "%v %s; ", e.At, e.Name)
		}
		return b.String()
	}
	differs := 0
	for _, s := range scenarios.All() {
		if s.Nemesis == nil {
			continue
		}
		a, b := sched(s, 42), sched(s, 42)
		if a != b || a == "" {
			t.Errorf("%s: seed 42 gave two schedules:\n%s\n%s", s.Name, a, b)
		}
		if sched(s, 43) != a {
			differs++
		}
	}
	if differs < 5 {
		t.Errorf("only %d schedules depend on the seed", differs)
	}
}

// TestSameSeedSameOperations: the k-th operation each process generates is
// the same for a seed (here: the field each hash-lease attempt targets), on
// two real runs whose timing differs.
func TestSameSeedSameOperations(t *testing.T) {
	fields := func(seed int64) map[int][]string {
		out := run(t, "hash-lease/baseline", "prim", seed)
		m := map[int][]string{}
		for _, r := range out.Records {
			if r.Type == history.Invoke && r.F == history.FAcquire {
				m[r.Process] = append(m[r.Process], r.Field)
			}
		}
		return m
	}
	a, b, c := fields(7), fields(7), fields(8)
	same, other := 0, 0
	for p := range a {
		n := min(len(a[p]), len(b[p]), 20)
		if n < 10 {
			t.Fatalf("process %d made %d/%d attempts", p, len(a[p]), len(b[p]))
		}
		if !slices.Equal(a[p][:n], b[p][:n]) {
			t.Errorf("process %d, seed 7: %v then %v", p, a[p][:n], b[p][:n])
		}
		same++
		if m := min(n, len(c[p])); !slices.Equal(a[p][:m], c[p][:m]) {
			other++
		}
	}
	if same == 0 || other == 0 {
		t.Errorf("%d processes compared, %d differ under another seed", same, other)
	}
}

// A fault that did not happen leaves the scenario untested: a one-second run
// of a scenario whose first kill comes later is UNKNOWN, never PASS.
func TestFaultThatDidNotHappenIsUnknown(t *testing.T) {
	ss, err := scenarios.Match([]string{"fenced-lock/kill-restart-noaof"})
	if err != nil || len(ss) != 1 {
		t.Fatal(ss, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: time.Second, Seed: 1, Impl: "prim", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if out.Verdict != scenarios.Unknown || !strings.Contains(out.Error, "no fault was scheduled") {
		t.Fatalf("verdict %s (%q), want UNKNOWN saying no fault happened", out.Verdict, out.Error)
	}
}

// TestLockScenariosJudgeLeaks: every scenario of a family that leaves leases
// on the server has the leaks property (the runner scans once every TTL has
// elapsed, or says N/A with the reason).
func TestLockScenariosJudgeLeaks(t *testing.T) {
	for _, s := range scenarios.All() {
		family := s.Name[:strings.Index(s.Name, "/")]
		if family != "fenced-lock" && family != "waiting-lock" && family != "hash-lease" && family != "rwlock" {
			continue
		}
		if !slices.ContainsFunc(s.Properties, func(p scenarios.Property) bool { return p.Checker == "leaks" }) {
			t.Errorf("%s: no leaks property", s.Name)
		}
	}
}

// rateHazards are the ratelimit scenarios that must show their hazard
// (over-limit after a proven loss or clock jump) with prim. The fixed
// window's are not among them: its own bound (2·limit in any span shorter
// than the window) absorbs one window's loss, and kill-restart-noaof's two
// losses in one window showed no over-limit in three seeds on a loaded CI
// machine; they may show HAZARD or PASS, and FAIL or UNKNOWN fails the test.
var rateHazards = map[string]bool{
	"ratelimit/sliding/kill-restart-noaof": true,
	"ratelimit/bucket/kill-restart-noaof":  true,
	"ratelimit/sliding/failover-forced":    true,
	"ratelimit/bucket/failover-forced":     true,
	"ratelimit/sliding/clock-skew":         true,
	"ratelimit/bucket/clock-skew":          true,
}

// TestRateLimitScenarios runs every ratelimit scenario briefly with prim:
// the bound must hold where it must, and the hazard scenarios must show the
// hazard with its proven effect (the fixed window's failover may not: its
// own bound absorbs one window's loss, as its summary says).
func TestRateLimitScenarios(t *testing.T) {
	ss, _ := scenarios.Match([]string{"ratelimit"})
	if len(ss) < 27 {
		t.Fatalf("the ratelimit family has %d scenarios", len(ss))
	}
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) {
			out := run(t, s.Name, "prim", 1)
			if out.Verdict == scenarios.Fail || out.Verdict == scenarios.Unknown {
				t.Fatalf("%s: %s %s", s.Name, out.Verdict, out.Error)
			}
			if out.Ops < 50 {
				t.Fatalf("only %d operations: the workload did not run", out.Ops)
			}
			// (A run with nothing granted has nothing to check: its
			// rate-limit property is UNKNOWN, refused above.)
			if rateHazards[s.Name] {
				// Whether a loss or a jump over-admits within the bound's span
				// depends on where in a window it falls: a run that shows no
				// hazard is a PASS ("hazard not shown"), not a defect. The family
				// must show it, so four more seeds may: one of five suffices
				// (three did not, once, for sliding/clock-skew in a CI run at
				// load 21, where fewer requests met the jump).
				for seed := int64(2); seed <= 5 && verdictOf(out, "rate-limit") == scenarios.Pass; seed++ {
					t.Logf("%s: seed %d did not show the hazard; trying seed %d", s.Name, seed-1, seed)
					out = run(t, s.Name, "prim", seed)
					if out.Verdict == scenarios.Fail || out.Verdict == scenarios.Unknown {
						t.Fatalf("%s (seed %d): %s %s", s.Name, seed, out.Verdict, out.Error)
					}
				}
				if v := verdictOf(out, "rate-limit"); v != scenarios.Hazard {
					t.Fatalf("%s: rate-limit is %s with seeds 1 to 5; the scenario must show the hazard", s.Name, v)
				}
				// The evidence: an over-limit span, marked as the hazard.
				for _, r := range out.Results {
					if r.Checker == "rate-limit" && (len(r.Result.Evidence) == 0 || !r.Result.Evidence[0].Hazard ||
						!strings.Contains(r.Result.Evidence[0].Msg, "granted within") || len(r.Result.Evidence[0].Ops) == 0) {
						t.Fatalf("%s: the hazard's evidence is missing: %+v", s.Name, r.Result.Evidence)
					}
					// The judge held every run of over-limit spans to a
					// fault's reach (models.TestJudgeRateLimitReach): the
					// runs must be there for it to judge.
					if r.Checker == "rate-limit" && len(r.Result.Reaches) == 0 {
						t.Fatalf("%s: HAZARD without the reach of its violations: %+v", s.Name, r.Result)
					}
					for _, x := range r.Result.Reaches {
						if r.Checker == "rate-limit" && (x.Horizon <= 0 || x.Since > x.First || x.First > x.Last) {
							t.Fatalf("%s: malformed reach %+v", s.Name, x)
						}
					}
				}
			}
			checkHazardAccounted(t, s, out)
		})
	}
}

// TestRateLimitPeers: the rate limiter libraries pass the baseline of their
// algorithm, and run nowhere else.
func TestRateLimitPeers(t *testing.T) {
	for _, tc := range []struct{ impl, scenario string }{
		{"redis_rate", "ratelimit/bucket/baseline"},
		{"ulule", "ratelimit/fixed/baseline"},
	} {
		t.Run(tc.impl, func(t *testing.T) {
			if out := run(t, tc.scenario, tc.impl, 1); out.Verdict != scenarios.Pass {
				t.Fatalf("%s on %s: %s", tc.impl, tc.scenario, out.Verdict)
			}
		})
	}
}

// supportCase is whether scenario runs impl.
type supportCase struct {
	scenario, impl string
	ok             bool
}

// expectSupports checks each case's Supports, and that a refused pair does
// not run either (refused, never a fake PASS).
func expectSupports(t *testing.T, cases []supportCase) {
	t.Helper()
	for _, tc := range cases {
		ss, _ := scenarios.Match([]string{tc.scenario})
		if got := ss[0].Supports(tc.impl); got != tc.ok {
			t.Errorf("%s supports %s: %v, want %v", tc.scenario, tc.impl, got, tc.ok)
		}
		if !tc.ok {
			if _, err := scenarios.Run(context.Background(), ss[0], scenarios.Config{Impl: tc.impl}); err == nil {
				t.Errorf("%s ran on %s", tc.scenario, tc.impl)
			}
		}
	}
}

// TestLimitersRunOnlyTheirAlgorithm: a rate limiter implementation runs only
// the scenarios of the algorithms it implements, and no lock scenario; a lock
// implementation runs no ratelimit scenario. Refused, never a fake PASS.
func TestLimitersRunOnlyTheirAlgorithm(t *testing.T) {
	expectSupports(t, []supportCase{
		{"ratelimit/bucket/baseline", "redis_rate", true},
		{"ratelimit/fixed/baseline", "redis_rate", false},
		{"ratelimit/sliding/baseline", "redis_rate", false},
		{"ratelimit/fixed/baseline", "ulule", true},
		{"ratelimit/bucket/baseline", "ulule", false},
		{"ratelimit/sliding/baseline", "prim", true},
		{"ratelimit/fixed/baseline", "redislock", false},
		{"ratelimit/fixed/baseline", "mutant-release-without-owner-check", false},
		{"fenced-lock/baseline", "redis_rate", false},
		{"fenced-lock/baseline", "ulule", false},
		{"hash-lease/baseline", "redis_rate", false},
	})
	if err := scenarios.ValidImpl("redis_rate"); err != nil {
		t.Error(err)
	}
	if err := scenarios.ValidImpl("no-such-limiter"); err == nil {
		t.Error("an unknown implementation is valid")
	}
}
