package mutants_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/scenarios/mutants"
	"github.com/coordtorture/coordtorture/testbed"
)

func build() string {
	if m := testbed.Matrix(); len(m) == 1 {
		return m[0]
	}
	return testbed.DefaultBuild
}

func check(t *testing.T, rec *history.Recorder, checker string) models.Result {
	t.Helper()
	c, ok := models.Lookup(checker)
	if !ok {
		t.Fatalf("no checker %s", checker)
	}
	r := c.Check(rec.History(), models.Options{})
	t.Logf("%s", r.String())
	return r
}

// expect requires the checker to pass the correct implementation and flag the mutant.
func expect(t *testing.T, correct bool, r models.Result) {
	t.Helper()
	if correct && r.Verdict != models.Pass {
		t.Fatalf("the correct implementation was flagged: %s", r.String())
	}
	if !correct && r.Verdict != models.Fail {
		t.Fatalf("the mutant was not flagged: %s", r.String())
	}
}

func TestLockMutants(t *testing.T) {
	for _, tc := range []struct {
		impl, checker string
		correct       bool
	}{
		{"prim", "exclusion", true},
		{"prim", "fenced-resource", true},
		{"mutant-release-without-owner-check", "exclusion", false},
		{"mutant-resource-ignores-tokens", "fenced-resource", false},
		{"prim", "lease-protocol", true},
		{"mutant-release-claims-released", "lease-protocol", false},
		{"mutant-renew-without-owner-check", "lease-protocol", false},
		{"prim", "token-order", true},
		{"mutant-token-not-incremented-after-expiry", "token-order", false},
		{"mutant-token-not-incremented-after-expiry", "fenced-resource", false},
	} {
		t.Run(tc.impl+"/"+tc.checker, func(t *testing.T) {
			ss, err := scenarios.Match([]string{"fenced-lock/pause-client"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: 4 * time.Second, Seed: 5, Impl: tc.impl, TTL: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range out.Results {
				if p.Checker == tc.checker {
					t.Logf("%s", p.Result.String())
					expect(t, tc.correct, p.Result)
					return
				}
			}
			t.Fatalf("checker %s did not run", tc.checker)
		})
	}
}

// TestPhantomOwnerMutant: an acquisition script that is not idempotent for
// its owner, resent by go-redis (default options: MaxRetries 3) after a lost
// reply, answers "not acquired" while the lease holds its owner; the state
// sampler sees that owner after the fail. prim's script recognises its own
// owner and must pass. The fault timing is the server's and the network's,
// so the mutant must be caught in one of three 12s seeds (a quiet machine
// catches it in the first 5s run about four times in five), and prim must
// pass.
func TestPhantomOwnerMutant(t *testing.T) {
	ss, err := scenarios.Match([]string{"fenced-lock/lose-replies"})
	if err != nil || len(ss) != 1 {
		t.Fatal(ss, err)
	}
	phantom := func(impl string, seed int64, d time.Duration) models.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: d, Seed: seed, Impl: impl})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s seed %d: uncertain %+v", impl, seed, out.Uncertain)
		for _, p := range out.Results {
			if p.Checker == "no-phantom-owner" {
				t.Logf("%s seed %d: %s", impl, seed, p.Result.String())
				return p.Result
			}
		}
		t.Fatalf("no-phantom-owner did not run on %s", impl)
		return models.Result{}
	}
	t.Run("prim", func(t *testing.T) { expect(t, true, phantom("prim", 1, 5*time.Second)) })
	t.Run("mutant-acquire-not-idempotent", func(t *testing.T) {
		// 12s runs hold about eight short loss windows each (a 5s run has
		// three): on a loaded CI machine (-race, packages in parallel) three
		// 5s runs once caught nothing. The loop stops at the first seed that
		// catches it.
		for seed := int64(1); seed <= 3; seed++ {
			r := phantom("mutant-acquire-not-idempotent", seed, 12*time.Second)
			if r.Verdict == models.Fail {
				if r.Kinds[models.KindPhantomOwner] == 0 {
					t.Fatalf("caught, but not as a phantom owner: %v", r.Kinds)
				}
				return
			}
		}
		t.Fatal("the mutant was not flagged in three seeds")
	})
}

func client(t *testing.T) (redis.UniversalClient, *testbed.Topology) {
	topo := testbed.Standalone(t, build())
	c, err := topo.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c, topo
}

func TestSemaphoreMutant(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		t.Run(fmt.Sprintf("atomic=%v", atomic), func(t *testing.T) {
			c, _ := client(t)
			ctx := context.Background()
			sem := &mutants.Semaphore{C: c, Key: "sem", Capacity: 2, Atomic: atomic}
			rec := history.NewRecorder(time.Now())
			var wg sync.WaitGroup
			for p := 0; p < 8; p++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 40; i++ {
						owner := fmt.Sprintf("p%d-%d", p, i)
						rec.Invoke(p, history.Op{F: history.FSemAcquire, Key: "sem", N: 1, Capacity: 2, TTLMs: 5000})
						ok, err := sem.TryAcquire(ctx, owner, 5*time.Second)
						switch {
						case err != nil:
							rec.Info(p, history.Op{Err: err.Error()})
							continue
						case !ok:
							rec.Fail(p, history.Op{})
							continue
						}
						rec.OK(p, history.Op{Owner: owner})
						time.Sleep(3 * time.Millisecond)
						rec.Invoke(p, history.Op{F: history.FRelease, Key: "sem", Owner: owner})
						if err := sem.Release(ctx, owner); err != nil {
							rec.Info(p, history.Op{Err: err.Error()})
						} else {
							rec.OK(p, history.Op{Value: history.ValueReleased})
						}
					}
				}()
			}
			wg.Wait()
			expect(t, atomic, check(t, rec, "semaphore"))
		})
	}
}

func TestLatchMutant(t *testing.T) {
	for _, twice := range []bool{false, true} {
		t.Run(fmt.Sprintf("twice=%v", twice), func(t *testing.T) {
			c, _ := client(t)
			ctx := context.Background()
			l := &mutants.Latch{C: c, Key: "latch", Twice: twice}
			rec := history.NewRecorder(time.Now())
			rec.Invoke(0, history.Op{F: history.FLatchCreate, Key: "latch", Count: 4})
			if err := l.Create(ctx, 4); err != nil {
				t.Fatal(err)
			}
			rec.OK(0, history.Op{Gen: 1})
			done := make(chan struct{})
			go func() { // the waiter
				defer close(done)
				rec.Invoke(9, history.Op{F: history.FLatchWait, Key: "latch", Gen: 1})
				for {
					if ok, _ := l.Done(ctx); ok {
						rec.OK(9, history.Op{Value: "true"})
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
			for p := 1; p <= 4; p++ {
				time.Sleep(20 * time.Millisecond)
				rec.Invoke(p, history.Op{F: history.FLatchCountDown, Key: "latch", Gen: 1})
				n, err := l.CountDown(ctx)
				if err != nil {
					rec.Fail(p, history.Op{Err: err.Error()})
				} else {
					rec.OK(p, history.Op{Count: n})
				}
			}
			<-done
			expect(t, !twice, check(t, rec, "latch"))
		})
	}
}

func TestLimiterMutant(t *testing.T) {
	for _, clientTime := range []bool{false, true} {
		t.Run(fmt.Sprintf("client-time=%v", clientTime), func(t *testing.T) {
			c, _ := client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			rec := history.NewRecorder(time.Now())
			const limit, window = 5, time.Second
			var wg sync.WaitGroup
			for p := 0; p < 4; p++ {
				// Four clients whose clocks are a quarter window apart.
				l := &mutants.Limiter{C: c, Key: "limit", Limit: limit, Window: window, ClientTime: clientTime,
					ClockOffset: time.Duration(p) * window / 4}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						rec.Invoke(p, history.Op{F: history.FAllow, Key: "limit", N: 1, Algo: "fixed", Limit: limit, WindowMs: window.Milliseconds()})
						ok, err := l.Allow(ctx)
						switch {
						case err != nil:
							rec.Info(p, history.Op{Err: err.Error()})
						case ok:
							rec.OK(p, history.Op{})
						default:
							rec.Fail(p, history.Op{})
						}
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			expect(t, !clientTime, check(t, rec, "rate-limit"))
		})
	}
}

// A resource that ignores tokens is a bug even in a scenario whose hazard is a
// regressed counter: its stale writes are FAIL, not HAZARD (they were reported
// as HAZARD with exit 0, crowded out of the evidence by "token reused" lines).
// Every scenario that must show a lost counter is run: a restart without
// persistence and each failover that loses acknowledged writes.
func TestResourceIgnoringTokensFailsInHazardScenario(t *testing.T) {
	for _, tc := range []struct {
		name string
		seed int64
		d    time.Duration
	}{
		{"fenced-lock/kill-restart-noaof", 3, 5 * time.Second},
		{"fenced-lock/failover-forced", 1, 4 * time.Second},
		{"fenced-lock/failover-cluster-takeover", 1, 4 * time.Second},
		{"fenced-lock/failover-cluster-force", 1, 4 * time.Second},
		{"fenced-lock/promote-replica", 1, 4 * time.Second},
		{"fenced-lock/split-brain", 1, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss, err := scenarios.Match([]string{tc.name})
			if err != nil || len(ss) != 1 {
				t.Fatal(ss, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: tc.d, Seed: tc.seed, Impl: "mutant-resource-ignores-tokens"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("hazard %q, effects %q", out.Hazard, out.Effects)
			for _, p := range out.Results {
				if p.Checker != "fenced-resource" {
					continue
				}
				t.Logf("%s: %s", p.Verdict, p.Result.Summary)
				if p.Verdict != scenarios.Fail {
					t.Fatalf("fenced-resource is %s, want FAIL: %s", p.Verdict, p.Result.Summary)
				}
				if len(p.Result.Evidence) == 0 || p.Result.Evidence[0].Kind != models.KindStaleWrite {
					t.Fatalf("the first evidence is not a stale write: %+v", p.Result.Evidence)
				}
				if out.Verdict != scenarios.Fail {
					t.Fatalf("run verdict %s, want FAIL", out.Verdict)
				}
				return
			}
			t.Fatal("fenced-resource did not run")
		})
	}
}

// The resource is a server behind its own links: a resource that ignores
// tokens FAILs there too, while those links are cut and healed.
func TestResourceIgnoringTokensFailsBehindTheNetwork(t *testing.T) {
	ss, err := scenarios.Match([]string{"fenced-lock/resource-partition"})
	if err != nil || len(ss) != 1 {
		t.Fatal(ss, err)
	}
	// A stale write needs a cut write to reach the resource after a newer
	// holder's, which one short run on a loaded machine may not give (CI: 22
	// writes in 4s, none stale): one of three seeds must show it.
	for seed := int64(1); seed <= 3; seed++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: 4 * time.Second, Seed: seed, Impl: "mutant-resource-ignores-tokens"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(out.Results, func(p scenarios.PropertyResult) bool { return p.Checker == "fenced-resource" })
		if i < 0 {
			t.Fatal("no fenced-resource property")
		}
		p := out.Results[i]
		t.Logf("seed %d: %s: %s", seed, p.Verdict, p.Result.Summary)
		if p.Result.Kinds[models.KindStaleWrite] > 0 {
			if p.Verdict != scenarios.Fail {
				t.Fatalf("stale writes accepted, but fenced-resource is %s", p.Verdict)
			}
			return
		}
		if p.Verdict == scenarios.Fail {
			t.Fatalf("fenced-resource FAILs without a stale write: %v", p.Result.Kinds)
		}
	}
	t.Fatal("fenced-resource is not FAIL with stale writes in seeds 1 to 3")
}

// A waiter that never wakes at the holder's deadline sleeps through every
// lease its holder abandoned, once active expiry is off: liveness FAILs, with
// evidence of an expired (not released) lock. prim's waiters, which also wake
// at the PTTL deadline, PASS the same scenario.
func TestWaiterIgnoringDeadline(t *testing.T) {
	for _, tc := range []struct {
		impl    string
		correct bool
	}{{"prim", true}, {"mutant-waiter-ignores-deadline", false}} {
		t.Run(tc.impl, func(t *testing.T) {
			ss, err := scenarios.Match([]string{"waiting-lock/abandoned-holders"})
			if err != nil || len(ss) != 1 {
				t.Fatal(ss, err)
			}
			if !ss[0].Supports(tc.impl) {
				t.Fatalf("%s refuses %s", ss[0].Name, tc.impl)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: build(), Duration: 4 * time.Second, Seed: 1, Impl: tc.impl})
			if err != nil {
				t.Fatal(err)
			}
			if out.Error != "" {
				t.Fatalf("the run did not set its condition: %s", out.Error)
			}
			for _, p := range out.Results {
				t.Logf("%s: %s %s", p.Checker, p.Verdict, p.Result.Summary)
			}
			for _, p := range out.Results {
				if p.Checker != "liveness" {
					continue
				}
				expect(t, tc.correct, p.Result)
				if !tc.correct && (len(p.Result.Evidence) == 0 || !strings.Contains(p.Result.Evidence[0].Msg, "lock expired")) {
					t.Fatalf("the evidence is not a waiter that slept through an expired lease: %+v", p.Result.Evidence)
				}
				if tc.correct && out.Verdict != scenarios.Pass {
					t.Fatalf("prim: %s", out.Verdict)
				}
				return
			}
			t.Fatal("liveness did not run")
		})
	}
}
