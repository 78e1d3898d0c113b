package scenarios_test

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/scenarios"
)

// ttlGrid is the --ttl and --duration pairs the schedule tests try: the
// flag's least ttl, the default, ttls above a third and above the whole of
// a short run.
var (
	ttlGrid      = []time.Duration{time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond, 1200 * time.Millisecond, 3 * time.Second, 5 * time.Second, 20 * time.Second}
	durationGrid = []time.Duration{2 * time.Second, 4 * time.Second, 10 * time.Second, 30 * time.Second}
)

func scenario(t *testing.T, name string) *scenarios.Scenario {
	t.Helper()
	ss, err := scenarios.Match([]string{name})
	if err != nil || len(ss) != 1 {
		t.Fatalf("%s: %v %v", name, ss, err)
	}
	return ss[0]
}

// needs is s.Needs(d, ttl), "" when s has none.
func needs(s *scenarios.Scenario, d, ttl time.Duration) string {
	if s.Needs == nil {
		return ""
	}
	return s.Needs(d, ttl)
}

// windows pairs each fault of the schedule with the heal after it.
func windows(t *testing.T, evs []scenarios.Event) [][2]time.Duration {
	t.Helper()
	var out [][2]time.Duration
	from := time.Duration(-1)
	for _, e := range evs {
		switch e.Kind {
		case "fault":
			from = e.At
		case "heal":
			if from < 0 {
				t.Fatalf("a heal at %v without a fault before it", e.At)
			}
			out = append(out, [2]time.Duration{from, e.At})
			from = -1
		}
	}
	return out
}

// TestTTLSchedules: a fault whose summary is stated against the lease keeps
// it at every --ttl, from 1ms to one longer than the run, or the run is
// refused with a reason (Scenario.Needs): redlock/node-loss starts r1 again
// more than a ttl plus the drift allowance after the kill, and the
// pause-primary scenarios stop the server for longer than a lease, within
// the run.
func TestTTLSchedules(t *testing.T) {
	for _, name := range []string{"redlock/node-loss", "fenced-lock/pause-primary", "rwlock/pause-primary"} {
		s := scenario(t, name)
		ran := 0
		for _, ttl := range ttlGrid {
			for _, d := range durationGrid {
				if why := needs(s, d, ttl); why != "" {
					continue
				}
				ran++
				evs := s.Nemesis(rand.New(rand.NewPCG(1, 0)), d, ttl)
				ws := windows(t, evs)
				if len(ws) == 0 {
					t.Errorf("%s, %v at --ttl %v: no fault scheduled, and the run is not refused", name, d, ttl)
				}
				least := ttl
				if name == "redlock/node-loss" {
					// prim's drift allowance, and the checkers' 20ms.
					least = ttl + ttl/100 + 2*time.Millisecond + 20*time.Millisecond
				}
				for _, w := range ws {
					if w[1]-w[0] <= least || w[1] >= d {
						t.Errorf("%s, %v at --ttl %v: a fault from %v to %v: not more than %v, or not within the run", name, d, ttl, w[0], w[1], least)
					}
				}
				if name == "redlock/node-loss" && len(ws) == 1 && d-ws[0][1] < d/6 {
					t.Errorf("%s, %v at --ttl %v: r1 back at %v leaves the run less than a sixth after it", name, d, ttl, ws[0][1])
				}
			}
		}
		if ran == 0 {
			t.Errorf("%s refuses every run of the grid", name)
		}
		// The default run is not refused.
		if why := needs(s, 4*time.Second, 500*time.Millisecond); why != "" {
			t.Errorf("%s refuses 4s at the default ttl: %s", name, why)
		}
	}
}

// TestTTLStalls: a scenario whose holders stop for 1.5× the ttl (a GC
// pause) before writing or renewing needs a run in which a stop begun in its
// first half ends: at --ttl 5s a 4s run, where no stop ends before the run
// does and nothing the summary states is tested, is refused.
func TestTTLStalls(t *testing.T) {
	for _, name := range []string{"fenced-lock/pause-client", "semaphore/pause-client", "rwlock/pause-client", "redlock/pause-client",
		"fenced-lock/resource-partition", "fenced-lock/resource-slow", "fenced-lock/resource-restart"} {
		s := scenario(t, name)
		for _, ttl := range ttlGrid {
			for _, d := range durationGrid {
				why := needs(s, d, ttl)
				if why == "" && 3*ttl > d {
					t.Errorf("%s, %v at --ttl %v: not refused, but a stop of 1.5× the ttl begun halfway does not end within the run", name, d, ttl)
				}
			}
		}
		if why := needs(s, 4*time.Second, 500*time.Millisecond); why != "" {
			t.Errorf("%s refuses 4s at the default ttl: %s", name, why)
		}
	}
}

// TestSlowBeyondLeaseTTL: fenced-lock/slow-beyond-lease's latency is drawn
// from the ttl (300ms ± 100ms each way at the default 500ms), so grants
// arrive after the lease they grant at any --ttl; at a ttl whose replies
// would outlast go-redis's 3s timeout the run is refused.
func TestSlowBeyondLeaseTTL(t *testing.T) {
	s := scenario(t, "fenced-lock/slow-beyond-lease")
	for _, tc := range []struct {
		ttl     time.Duration
		latency string
	}{{500 * time.Millisecond, "300ms ± 100ms"}, {time.Second, "600ms ± 200ms"}, {50 * time.Millisecond, "30ms ± 10ms"}} {
		if why := needs(s, 4*time.Second, tc.ttl); why != "" {
			t.Errorf("--ttl %v refused: %s", tc.ttl, why)
			continue
		}
		evs := s.Nemesis(rand.New(rand.NewPCG(1, 0)), 4*time.Second, tc.ttl)
		if len(evs) == 0 || !strings.Contains(evs[0].Name, tc.latency) {
			t.Errorf("--ttl %v: first event %+v, want %s latency", tc.ttl, evs, tc.latency)
		}
	}
	if why := needs(s, 10*time.Second, 5*time.Second); why == "" {
		t.Errorf("--ttl 5s: not refused; its replies (3s ± 1s each way) would outlast the 3s timeout")
	}
}

// TestNeedsReasonsDo: every refusal names a --duration that the scenario
// accepts at that ttl, and a --ttl, when it names one, that it accepts at
// that duration.
func TestNeedsReasonsDo(t *testing.T) {
	durRe := regexp.MustCompile(`--duration (\S+) or more`)
	ttlRe := regexp.MustCompile(`--ttl (\S+) or (?:less|more)`)
	refused := 0
	for _, s := range scenarios.All() {
		for _, ttl := range ttlGrid {
			for _, d := range durationGrid {
				why := needs(s, d, ttl)
				if why == "" {
					continue
				}
				refused++
				named := false
				if m := durRe.FindStringSubmatch(why); m != nil {
					named = true
					if nd, err := time.ParseDuration(m[1]); err != nil || needs(s, nd, ttl) != "" {
						t.Errorf("%s, %v at --ttl %v: %q names --duration %s, which is refused too (%v)", s.Name, d, ttl, why, m[1], err)
					}
				}
				if m := ttlRe.FindStringSubmatch(why); m != nil {
					named = true
					if nt, err := time.ParseDuration(m[1]); err != nil || needs(s, d, nt) != "" {
						t.Errorf("%s, %v at --ttl %v: %q names --ttl %s, which is refused too (%v)", s.Name, d, ttl, why, m[1], err)
					}
				}
				if !named {
					t.Errorf("%s, %v at --ttl %v: %q names neither a --duration nor a --ttl that would do", s.Name, d, ttl, why)
				}
			}
		}
	}
	if refused == 0 {
		t.Error("no scenario refuses any run of the grid")
	}
}

// TestRedlockShortTTL: a Redlock lease shorter than 20ms has little or no
// validity left after the drift allowance and the round trips (at 1ms
// none: every acquisition is refused), so every redlock scenario refuses
// such a run, UNKNOWN with the --ttl that would do, where it used to FAIL
// progress (no acquisition answered) without a word about the
// implementation; 20ms and the default run.
func TestRedlockShortTTL(t *testing.T) {
	ss, _ := scenarios.Match([]string{"redlock"})
	for _, s := range ss {
		want := "--ttl 20ms or more"
		if s.Name == "redlock/latency" {
			want = "--ttl 240ms or more" // its own floor (TestRedlockLatencyTTL)
		}
		if why := needs(s, 4*time.Second, time.Millisecond); !strings.Contains(why, want) {
			t.Errorf("%s at --ttl 1ms: %q, want a refusal naming %s", s.Name, why, want)
		}
		for _, ttl := range []time.Duration{20 * time.Millisecond, 500 * time.Millisecond} {
			if why := needs(s, 4*time.Second, ttl); why != "" && (s.Name != "redlock/latency" || ttl >= 240*time.Millisecond) {
				t.Errorf("%s at --ttl %v: refused: %s", s.Name, ttl, why)
			}
		}
	}
	out := runConfig(t, "redlock/baseline", scenarios.Config{Duration: time.Second, TTL: time.Millisecond, Seed: 1, Impl: "prim"})
	if out.Verdict != scenarios.Unknown || len(out.Results) != 0 || !strings.Contains(out.Error, "--ttl 20ms or more") {
		t.Fatalf("redlock/baseline at --ttl 1ms: %s with %d properties (%q), want UNKNOWN, not run, naming --ttl 20ms or more",
			out.Verdict, len(out.Results), out.Error)
	}
}

// TestRedlockLatencyTTL: redlock/latency's 80ms round trip leaves a short
// lease no validity to claim, so no acquisition succeeds under the latency
// and redlock-validity would judge only the run's healthy ends: a --ttl
// below 240ms is refused, the default runs.
func TestRedlockLatencyTTL(t *testing.T) {
	s := scenario(t, "redlock/latency")
	if why := needs(s, 4*time.Second, 100*time.Millisecond); !strings.Contains(why, "--ttl 240ms or more") {
		t.Errorf("--ttl 100ms: %q, want a refusal naming --ttl 240ms or more", why)
	}
	if why := needs(s, 4*time.Second, 500*time.Millisecond); why != "" {
		t.Errorf("the default ttl refused: %s", why)
	}
}
