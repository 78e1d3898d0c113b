package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
	_ "github.com/coordtorture/coordtorture/scenarios/mutants"
	"github.com/coordtorture/coordtorture/testbed"
)

// coordtortureExit is coordtorture's exit status for a run's verdict
// (cmd/coordtorture: FAIL 1, UNKNOWN 2, PASS and HAZARD 0).
func coordtortureExit(v scenarios.Verdict) int {
	switch v {
	case scenarios.Fail:
		return 1
	case scenarios.Unknown:
		return 2
	}
	return 0
}

// TestSameVerdictAsTheRun runs real scenarios, writes their histories as
// coordtorture does, and checks them with fencecheck: from the header it must
// reach the run's verdict for every property and overall, and the run's exit
// status. A restart without persistence shows its hazard (HAZARD, exit 0); a
// resource that ignores tokens FAILs, and so does a semaphore renewing a
// released permit. Without its header the hazard's history
// is FAIL: the header is what carries the run's expectations. The scenarios'
// own checks are recomputed too, never repeated (issue 30, rule 8): the
// Redlock validity from the history alone (a Redlock that ignores its drift
// allowance FAILs with or without the header), the servers' state read
// after the run from the header's data (semaphore/no-expiry-crash,
// hash-lease/old-server), a token-order with nothing to check (an
// unfenced implementation) N/A from the run's reason confirmed by the
// history, the stale writes of redlock/pause-client and the lost
// notifications of latch/lost-notifications from the history.
func TestSameVerdictAsTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers")
	}
	b := testbed.DefaultBuild
	if m := testbed.Matrix(); len(m) == 1 {
		b = m[0]
	}
	for _, tc := range []struct {
		scenario, impl string
		seed           int64
		want           scenarios.Verdict
	}{
		{"fenced-lock/kill-restart-noaof", "prim", 1, scenarios.Hazard},
		{"fenced-lock/pause-client", "mutant-resource-ignores-tokens", 5, scenarios.Fail},
		// lease-protocol judges the semaphore's answers in both.
		{"semaphore/baseline", "mutant-semaphore-renew-recreates", 1, scenarios.Fail},
		{"redlock/baseline", "mutant-redlock-ignores-drift", 1, scenarios.Fail},
		{"redlock/pause-client", "prim", 1, ""}, // PASS when a pause caught a write, else UNKNOWN
		{"semaphore/no-expiry-crash", "prim", 1, scenarios.Pass},
		{"hash-lease/old-server", "prim", 1, scenarios.Pass},
		{"latch/lost-notifications", "prim", 1, ""}, // completion-cut-off from the history: PASS, or UNKNOWN when no count reached zero during a cut (load)
		{"fenced-lock/baseline", "redsync", 1, scenarios.Pass},
	} {
		t.Run(tc.impl+"/"+tc.scenario, func(t *testing.T) {
			ss, err := scenarios.Match([]string{tc.scenario})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			o, err := scenarios.Run(ctx, ss[0], scenarios.Config{Build: b, Duration: 4 * time.Second, Seed: tc.seed, Impl: tc.impl, Logf: t.Logf,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range o.Results {
				t.Logf("run: %-7s %s: %s", r.Verdict, r.Checker, r.Result.Summary)
			}
			if (tc.want != "" && o.Verdict != tc.want) || (tc.want == "" && o.Verdict != scenarios.Pass && o.Verdict != scenarios.Unknown) {
				t.Fatalf("the run is %s, want %s (%s)", o.Verdict, tc.want, o.Error)
			}
			dir := t.TempDir()
			if err := reports.WriteDir(dir, &reports.Run{Outcomes: []*scenarios.Outcome{o}}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, reports.HistoryFile(o))
			var out, errb bytes.Buffer
			code := run([]string{"--json", path}, nil, &out, &errb)
			var rep report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%v\n%s\n%s", err, out.String(), errb.String())
			}
			fr := rep.Files[0]
			if fr.Header == nil || fr.Header.Scenario != tc.scenario || fr.Header.Impl != tc.impl || fr.Header.Seed != tc.seed {
				t.Fatalf("header %+v", fr.Header)
			}
			if len(fr.Results) != len(o.Results) {
				t.Fatalf("fencecheck checked %d properties, the run %d", len(fr.Results), len(o.Results))
			}
			for k, r := range o.Results {
				got := fr.Results[k]
				t.Logf("fencecheck: %-7s %s: %s", got.Judgement, got.Checker, got.Summary)
				if got.Checker != r.Checker || got.Judgement != r.Verdict || got.Expect != r.Expect {
					t.Errorf("property %d: fencecheck %s %s (%s), the run %s %s (%s)", k, got.Checker, got.Judgement, got.Expect, r.Checker, r.Verdict, r.Expect)
				}
			}
			if fr.Verdict != o.Verdict || fr.Hazard != o.Hazard || !slices.Equal(fr.Effects, o.Effects) {
				t.Errorf("fencecheck's verdict %s (hazard %q, effects %q), the run's %s (hazard %q, effects %q)",
					fr.Verdict, fr.Hazard, fr.Effects, o.Verdict, o.Hazard, o.Effects)
			}
			if want := coordtortureExit(o.Verdict); code != want || rep.Exit != want {
				t.Errorf("fencecheck exits %d, coordtorture %d", code, want)
			}
			if tc.want != scenarios.Hazard && tc.want != scenarios.Fail {
				return
			}
			// Without the header the hazard's violations are plain FAILs,
			// and a FAIL stays one.
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			text, err := history.NewTextReader(f)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(text)
			if err != nil {
				t.Fatal(err)
			}
			bare := filepath.Join(dir, "bare.jsonl")
			if err := os.WriteFile(bare, data[bytes.IndexByte(data, '\n')+1:], 0o644); err != nil {
				t.Fatal(err)
			}
			out.Reset()
			if code := run([]string{bare}, nil, &out, &errb); code != 1 {
				t.Errorf("without the header: exit %d, want 1\n%s", code, out.String())
			}
		})
	}
}
