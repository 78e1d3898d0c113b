package scenarios_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed"
)

// oldBuild is a build without hash-field expiry (Redis 7.0); the test that
// needs it skips, saying so, when it was not fetched.
func oldBuild(t *testing.T) string {
	t.Helper()
	const b = "redis-7.0"
	if _, err := testbed.LookupBuild(b); err != nil {
		t.Skipf("needs %s (a server without hash-field expiry): %v", b, err)
	}
	return b
}

// TestHashLeaseWithoutHashFieldExpiryIsNA: a hash-lease scenario on a
// server without hash-field expiry (redis-7.0), local or as an external
// deployment, runs no workload and is N/A, every property N/A naming the
// missing feature and the server's answer (it was UNKNOWN: progress had
// nothing to judge, beside an exclusion that PASSed on no lease at all).
func TestHashLeaseWithoutHashFieldExpiryIsNA(t *testing.T) {
	b := oldBuild(t)
	ss, err := scenarios.Match([]string{"hash-lease/baseline"})
	if err != nil || len(ss) != 1 {
		t.Fatal(ss, err)
	}
	topo := testbed.Standalone(t, b)
	for _, c := range []struct {
		name string
		cfg  scenarios.Config
	}{
		{"local", scenarios.Config{Build: b}},
		{"external", scenarios.Config{External: &scenarios.External{Addrs: []string{topo.Node("n1").DirectAddr()}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			// A workload that ran would take the whole 30s.
			cfg.Duration, cfg.Seed, cfg.Clients, cfg.Logf = 30*time.Second, 1, 4, t.Logf
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			start := time.Now()
			o, err := scenarios.Run(ctx, ss[0], cfg)
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > 25*time.Second {
				t.Errorf("took %v: the workload ran", el)
			}
			if o.Verdict != scenarios.NA || !strings.Contains(o.Unsupported, "hash-field expiry") || !strings.Contains(o.Unsupported, "unknown command") ||
				!strings.Contains(o.Unsupported, "Redis 7.4+") || o.Ops != 0 || o.Error != "" {
				t.Errorf("verdict %s, unsupported %q, %d operations, error %q; want N/A naming hash-field expiry, nothing run", o.Verdict, o.Unsupported, o.Ops, o.Error)
			}
			if len(o.Results) != len(ss[0].Properties) {
				t.Errorf("%d property results for %d properties", len(o.Results), len(ss[0].Properties))
			}
			for _, r := range o.Results {
				if r.Verdict != scenarios.NA || !strings.Contains(r.Result.Summary, "hash-field expiry") {
					t.Errorf("%s: %s (%s), want N/A naming hash-field expiry", r.Checker, r.Verdict, r.Result.Summary)
				}
			}
			// fencecheck judges the history file (its header alone) the same:
			// every property N/A with the reason.
			if o.Header == nil || len(o.Header.Properties) != len(ss[0].Properties) {
				t.Fatalf("no header for fencecheck: %+v", o.Header)
			}
			h := &history.History{Header: o.Header}
			for k, p := range ss[0].Properties {
				r, j, _ := models.CheckProperty(h, p, o.Header.Properties[k].NotChecked, ss[0].Check, nil)
				if j != models.JudgedNA || !strings.Contains(r.Summary, "hash-field expiry") {
					t.Errorf("offline, %s: %s (%s), want N/A naming hash-field expiry", p.Checker, j, r.Summary)
				}
			}
			t.Logf("%s: %s", o.Verdict, o.Unsupported)
		})
	}
}

// TestAllPropertiesNAIsUnknown: a run in which every property had nothing
// to check checked nothing: UNKNOWN, as models.Overall says and fencecheck
// judges the same history (the runner left the N/A properties out of its
// verdict, so such a run PASSed).
func TestAllPropertiesNAIsUnknown(t *testing.T) {
	s := &scenarios.Scenario{Name: "fenced-lock/idle", Summary: "no process does anything",
		Topo:       scenarios.Topology{Kind: testbed.KindStandalone},
		Workload:   func(ctx context.Context, _ *scenarios.Env, _ int) { <-ctx.Done() },
		Properties: []scenarios.Property{{Checker: "leaks"}}, Impls: []string{"prim"}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := scenarios.Run(ctx, s, scenarios.Config{Build: build(), Duration: time.Second, Seed: 1, Clients: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Results) != 1 || o.Results[0].Verdict != scenarios.NA {
		t.Fatalf("leaks: %+v, want N/A (no acquisition)", o.Results)
	}
	if want := models.Overall(models.JudgedNA); o.Verdict != want {
		t.Errorf("every property N/A: verdict %s, want %s", o.Verdict, want)
	}
}
