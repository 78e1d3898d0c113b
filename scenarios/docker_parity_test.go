package scenarios_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed/docker"
)

// TestProviderParity: a chosen set of scenarios gives the same verdicts on
// the local provider and the docker one (same seed, same duration): the
// faults — client partition, SIGSTOP against docker pause, kill -9 and a
// restart without persistence, a sentinel failover, a cluster failover, a
// Redlock node of an independent set cut off —
// have the same effects on processes and containers. Skips only when no
// Docker engine is reachable.
func TestProviderParity(t *testing.T) {
	b := docker.NeedImages(t, build())[0]
	// Four at a time: seven topologies of containers at once starved a
	// cluster node on a loaded 2-core CI machine (it left ROLE unanswered
	// for seconds during a failover: UNKNOWN).
	slots := make(chan struct{}, 4)
	for _, name := range []string{
		"fenced-lock/baseline",
		"fenced-lock/partition-client",
		"fenced-lock/pause-primary",
		"fenced-lock/kill-restart-noaof",
		"fenced-lock/failover-sentinel",
		"fenced-lock/failover-cluster",
		"redlock/partition-minority", // an independent set, a node cut off
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			ss, err := scenarios.Match([]string{name})
			if err != nil || len(ss) != 1 {
				t.Fatalf("%s: %v %v", name, ss, err)
			}
			verdicts := map[string]scenarios.Verdict{}
			effects := map[string]string{}
			for _, provider := range []string{"local", "docker"} {
				// 4s: fenced-lock/pause-primary's pause outlasts a lease
				// with the schedule's end margin only from 3.2s on.
				d := 4 * time.Second
				if name == "fenced-lock/kill-restart-noaof" {
					// A container restart (a new container on the node's
					// volume) takes about a second and a half, a process's
					// a few milliseconds: in 3s the docker run can end before
					// any acquisition after the restart shows the regression.
					// 5s holds one kill for seed 7 (at 1.9s, the restart
					// begun at 2.2s) and nearly three seconds after it; 6s
					// held a second kill at 5.35s whose restart, begun at
					// 5.65s, a slow container restart before it pushed past
					// the run's end on a loaded CI machine: UNKNOWN.
					d = 5 * time.Second
				}
				cfg := scenarios.Config{Build: b, Duration: d, Clients: 4, Seed: 7}
				if provider == "docker" {
					cfg.Docker = &scenarios.Docker{}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				start := time.Now()
				o, err := scenarios.Run(ctx, ss[0], cfg)
				cancel()
				if err != nil {
					t.Fatalf("%s on %s: %v", name, provider, err)
				}
				if o.Error != "" {
					t.Errorf("%s on %s went wrong: %s", name, provider, o.Error)
				}
				if o.Provider != provider {
					t.Errorf("%s: the outcome names provider %q, want %q", name, o.Provider, provider)
				}
				t.Logf("%s on %s: %s (hazard %q) in %v", name, provider, o.Verdict, o.Hazard, time.Since(start).Round(time.Millisecond))
				verdicts[provider] = o.Verdict
				effects[provider] = strings.Join(o.Effects, "; ")
			}
			// A scenario that may show its hazard (failover-sentinel: the
			// last increments may or may not have replicated;
			// kill-restart-noaof: an acquisition after the restart may or
			// may not come before the run ends, and a container restarts in
			// a second and a half where a process takes milliseconds) shows
			// it or not by timing, on either provider: HAZARD against PASS is
			// no difference between them there; FAIL or UNKNOWN on either
			// side is.
			mayDiffer := false
			for _, p := range ss[0].Properties {
				mayDiffer = mayDiffer || p.Expect == scenarios.MayHazard
			}
			if verdicts["local"] != verdicts["docker"] && !mayDiffer {
				t.Errorf("%s: %s on local, %s on docker", name, verdicts["local"], verdicts["docker"])
			}
			// Where the verdict may differ, the fault must still have had
			// its effect on both: a kill and restart that did nothing in a
			// container would PASS beside local's HAZARD.
			if name == "fenced-lock/kill-restart-noaof" {
				for p, ef := range effects {
					if !strings.Contains(ef, "lost the dataset") {
						t.Errorf("%s on %s: the restart's loss of the dataset was not proven (effects: %q)", name, p, ef)
					}
				}
			}
			for p, v := range verdicts {
				if v == scenarios.Fail || v == scenarios.Unknown {
					t.Errorf("%s: %s on %s", name, v, p)
				}
			}
		})
	}
}
