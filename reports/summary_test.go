package reports_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
)

// comparisonRun is an --impl all run: prim shows the hazard, a peer and a
// mutant FAIL, and the peer's token-order has nothing to check.
func comparisonRun() *reports.Run {
	prop := func(checker string, v scenarios.Verdict, n int) scenarios.PropertyResult {
		mv := map[scenarios.Verdict]models.Verdict{scenarios.Pass: models.Pass, scenarios.Hazard: models.Fail,
			scenarios.Fail: models.Fail, scenarios.Unknown: models.Unknown, scenarios.NA: models.Unknown}[v]
		// As the checkers write them: counts in the right plural, times
		// in seconds from the run's start.
		violations := fmt.Sprintf("%d violations", n)
		if n == 1 {
			violations = "1 violation"
		}
		r := models.Result{Checker: checker, Verdict: mv, Violations: n,
			Summary: violations + "; first: windows overlap: [2.577644073s, 2.63114799s)"}
		if v == scenarios.NA {
			r.Summary = "nothing to check: redislock hands out no fencing tokens"
		}
		for i := range min(n, 20) {
			r.Evidence = append(r.Evidence, models.Evidence{Key: "k", Msg: fmt.Sprintf("%s evidence %d at 1.%03ds", checker, i, i),
				Ops: []history.Operation{{Op: history.Op{I: int64(i), F: "acquire", Key: "k", Type: history.OK, Token: 7, T: 3034000000}, Return: 3035500000, Done: true}}})
		}
		return scenarios.PropertyResult{Checker: checker, Expect: "may show hazard", Verdict: v, Result: r}
	}
	return &reports.Run{Outcomes: []*scenarios.Outcome{
		{Scenario: "fenced-lock/failover-forced", Impl: "prim", Build: "redis-8.0", Seed: 3, Verdict: scenarios.Hazard, Duration: 2 * time.Second, Ops: 4,
			Results: []scenarios.PropertyResult{prop("token-order", scenarios.Hazard, 721), prop("exclusion", scenarios.Hazard, 1), prop("progress", scenarios.Pass, 0)},
			Records: []history.Op{{I: 0, F: "acquire", Type: history.Invoke}, {I: 1, F: "acquire", Type: history.OK},
				{I: 2, F: "acquire", Type: history.Invoke}, {I: 3, F: "acquire", Type: history.Fail},
				{I: 4, F: "write", Type: history.Invoke}, {I: 5, F: "write", Type: history.OK}, {I: 6, F: "sample", Type: history.OK}}},
		{Scenario: "fenced-lock/failover-forced", Impl: "redislock", Build: "redis-8.0", Seed: 3, Verdict: scenarios.Fail, Duration: 2 * time.Second,
			Uncertain: models.Uncertainty{Info: 3, InfoAcquisitions: 1, Executed: -1, Observed: 0}, Hazard: "shown", Effects: []string{"at 2.6s: redislock's effect"},
			Results: []scenarios.PropertyResult{prop("fenced-resource", scenarios.Fail, 4), prop("token-order", scenarios.NA, 0)}},
		{Scenario: "fenced-lock/failover-forced", Impl: "mutant-resource-ignores-tokens", Build: "redis-8.0", Seed: 3, Verdict: scenarios.Fail,
			Results: []scenarios.PropertyResult{prop("fenced-resource", scenarios.Fail, 2)}},
	}}
}

// TestOverallIsPrimsBesidePeers: with prim beside peers and mutants, every
// surface states prim's verdict as the overall one (the old summary said
// "overall: FAIL (prim: HAZARD, …)" while the exit status was 0), the peers
// and mutants visibly a comparison, and junit fails exactly when the exit
// status is not 0.
func TestOverallIsPrimsBesidePeers(t *testing.T) {
	dir := t.TempDir()
	if err := reports.WriteDir(dir, comparisonRun()); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sum := read("summary.txt")
	for _, want := range []string{
		"\npeers (comparison, do not set the verdict): redislock FAIL\n",
		"\nmutants (comparison, deliberately broken for the checkers to catch; do not set the verdict): mutant-resource-ignores-tokens FAIL\n",
		"\noverall: HAZARD (prim's verdicts, exit status 0)\n",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary.txt lacks %q:\n%s", want, sum)
		}
	}
	if !strings.HasSuffix(sum, "\noverall: HAZARD (prim's verdicts, exit status 0)\n") {
		t.Errorf("summary.txt does not end with the overall verdict:\n%s", sum)
	}
	var junit struct {
		Name     string `xml:"name,attr"`
		Failures int    `xml:"failures,attr"`
		Suites   []struct {
			Name     string `xml:"name,attr"`
			Failures int    `xml:"failures,attr"`
			Skipped  int    `xml:"skipped,attr"`
			Cases    []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
				Skipped *struct {
					Message string `xml:"message,attr"`
				} `xml:"skipped"`
				Out string `xml:"system-out"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(read("junit.xml")), &junit); err != nil {
		t.Fatal(err)
	}
	if junit.Failures != 0 || junit.Name != "coordtorture: overall HAZARD" {
		t.Errorf("junit: %d failures, name %q; want none (exit status 0) and the overall verdict", junit.Failures, junit.Name)
	}
	for _, s := range junit.Suites {
		if s.Failures != 0 {
			t.Errorf("junit suite %q has %d failures, exit status 0", s.Name, s.Failures)
		}
		if strings.Contains(s.Name, "[prim,") == strings.Contains(s.Name, "(comparison") {
			t.Errorf("junit suite %q: only the peers and mutants are comparisons", s.Name)
		}
	}
	peer := junit.Suites[1]
	if peer.Cases[0].Failure != nil || !strings.HasPrefix(peer.Cases[0].Out, "FAIL (may show hazard): 4 violations") {
		t.Errorf("the peer's FAIL is not shown as a comparison: %+v", peer.Cases[0])
	}
	if peer.Skipped != 1 || peer.Cases[1].Skipped == nil || !strings.Contains(peer.Cases[1].Skipped.Message, "nothing to check: redislock hands out no fencing tokens") {
		t.Errorf("N/A is not a skipped case with its reason: %+v", peer.Cases[1])
	}
	var rep struct {
		Overall     string
		OverallFrom []string `json:"overall_from"`
		Comparison  []string
	}
	if err := json.Unmarshal([]byte(read("report.json")), &rep); err != nil || rep.Overall != "HAZARD" ||
		fmt.Sprint(rep.OverallFrom) != "[prim]" || len(rep.Comparison) != 2 {
		t.Errorf("report.json: %+v %v", rep, err)
	}
	// Read back (as replay does), the run has the same overall verdict.
	var back reports.Run
	if err := json.Unmarshal([]byte(read("report.json")), &back); err != nil || back.Overall() != scenarios.Hazard || len(back.Outcomes) != 3 {
		t.Errorf("report.json read back: %v %v", back.Overall(), err)
	}

	// A replay keeps its run's rule: the peer's FAIL alone is still a
	// comparison.
	replay := comparisonRun()
	replay.Outcomes = replay.Outcomes[1:2]
	replay.DecidedBy = []string{"prim"}
	if replay.Overall() != scenarios.Pass || len(replay.Comparison()) != 1 {
		t.Errorf("replay of the peer's failure: overall %s, comparison %v", replay.Overall(), replay.Comparison())
	}

	// An interrupted run is UNKNOWN at best, and says so.
	cut := comparisonRun()
	cut.Interrupted = true
	var cb bytes.Buffer
	if err := reports.WriteSummary(&cb, cut); err != nil {
		t.Fatal(err)
	}
	if cut.Overall() != scenarios.Unknown || !strings.HasSuffix(cb.String(), "\noverall: UNKNOWN (interrupted: not every scenario ran; prim's verdicts, exit status 2)\n") {
		t.Errorf("interrupted run: %s\n%s", cut.Overall(), cb.String())
	}

	// Without prim, every implementation decides.
	r := comparisonRun()
	r.Outcomes = r.Outcomes[1:]
	var b bytes.Buffer
	if err := reports.WriteSummary(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\noverall: FAIL (redislock: FAIL, mutant-resource-ignores-tokens: FAIL; exit status 1)\n") || strings.Contains(b.String(), "comparison") {
		t.Errorf("peers alone: %s", b.String())
	}
}

// TestSummaryReadable: evidence a person can read: times in seconds from
// the run's start, "N more" counting every violation the checker found (721,
// of which it kept 20), right plurals, completed operations per second by
// kind; on a terminal the evidence capped and the verdict table last.
func TestSummaryReadable(t *testing.T) {
	r := comparisonRun()
	var full bytes.Buffer
	if err := reports.WriteSummary(&full, r); err != nil {
		t.Fatal(err)
	}
	s := full.String()
	for _, want := range []string{
		"token-order (may show hazard, seed 3): 721 violations\n",
		"FAIL fenced-lock/failover-forced [mutant-resource-ignores-tokens] (comparison) fenced-resource (may show hazard, seed 3): 2 violations\n",
		"exclusion (may show hazard, seed 3): 1 violation\n",
		"token-order evidence 19 at 1.019s",
		"#0 proc 0 acquire key=\"k\" ok token=7 [3.034s – 3.035s]",
		"… 701 more violations (the checker keeps the first 20 as evidence",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary.txt lacks %q:\n%s", want, s)
		}
	}
	for _, bad := range []string{"(s)", "7 more", "… 1 more"} {
		if strings.Contains(s, bad) {
			t.Errorf("summary.txt has %q:\n%s", bad, s)
		}
	}
	if ns := regexp.MustCompile(`\d+ns\b`).FindString(s); ns != "" {
		t.Errorf("summary.txt has a time in ns, %q:\n%s", ns, s)
	}
	// The table: 1 acquisition and 1 write in 2s, not 3 operations (the
	// refused attempt and the sample are not throughput).
	var row []string
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "prim" {
			row = f
		}
	}
	if len(row) < 7 || strings.Join(row[3:7], " ") != "HAZARD 0.5 0.5 4" {
		t.Errorf("table does not count completed acquisitions and writes per second:\n%s", s)
	}
	if !strings.Contains(s, "[redislock]: 3 info operations, 1 of them an acquisition, 0 seen holding") || !strings.Contains(s, "at 2.6s: redislock's effect") {
		t.Errorf("summary.txt lacks the comparison's uncertain outcomes or effects:\n%s", s)
	}
	if strings.Index(s, "SCENARIO") > strings.Index(s, "HAZARD fenced-lock") {
		t.Errorf("summary.txt: the table comes first")
	}

	var term bytes.Buffer
	if err := reports.WriteTerminalSummary(&term, r); err != nil {
		t.Fatal(err)
	}
	ts := term.String()
	if strings.Count(ts, "token-order evidence") != reports.TerminalEvidence || !strings.Contains(ts, "… 719 more violations (summary.txt lists the first 20 of the 721)") {
		t.Errorf("terminal evidence not capped at %d with the count of the rest:\n%s", reports.TerminalEvidence, ts)
	}
	if strings.Contains(ts, "fenced-resource evidence") || !strings.Contains(ts, "FAIL fenced-lock/failover-forced [redislock] (comparison) fenced-resource (may show hazard, seed 3): 4 violations; first: windows overlap: [2.577644073s, 2.63114799s)\n  (its evidence is in summary.txt)\n") {
		t.Errorf("terminal: a comparison's FAIL is one line, without evidence:\n%s", ts)
	}
	if strings.Contains(ts, "3 info operations") || strings.Contains(ts, "redislock's effect") ||
		!strings.Contains(ts, "(summary.txt also has the uncertain outcomes and fault effects of the comparison's runs)") {
		t.Errorf("terminal: the comparison's uncertain outcomes and effects are left to summary.txt:\n%s", ts)
	}
	table, evidence := strings.Index(ts, "SCENARIO"), strings.LastIndex(ts, "evidence 1 at")
	if table < evidence || !strings.HasSuffix(ts, "\noverall: HAZARD (prim's verdicts, exit status 0)\n") {
		t.Errorf("terminal: the table and the overall verdict come last:\n%s", ts)
	}
}

// TestReportJSONKeepsItsRule: report.json's overall_from is read back as the
// run's DecidedBy, so a run (a replay --all of an --impl all run, say) where
// only a peer failed reads back with prim deciding: the overall verdict and
// the deciding implementations are those the run stated, not the peer's.
func TestReportJSONKeepsItsRule(t *testing.T) {
	r := comparisonRun()
	r.Outcomes = r.Outcomes[1:2] // redislock's FAIL alone
	r.DecidedBy = []string{"prim"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back reports.Run
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Overall() != r.Overall() || fmt.Sprint(back.Deciding()) != fmt.Sprint(r.Deciding()) || back.Overall() != scenarios.Pass {
		t.Errorf("read back: overall %s from %v; written: overall %s from %v", back.Overall(), back.Deciding(), r.Overall(), r.Deciding())
	}
	// A report.json without overall_from (older runs) keeps Deciding's rule.
	var old reports.Run
	if err := json.Unmarshal([]byte(`{"outcomes":[{"impl":"redislock","verdict":"FAIL"}]}`), &old); err != nil ||
		old.Overall() != scenarios.Fail || fmt.Sprint(old.Deciding()) != "[redislock]" {
		t.Errorf("without overall_from: overall %s from %v (%v)", old.Overall(), old.Deciding(), err)
	}
}

// TestInterruptedJUnitFails: an interrupted run's overall verdict is
// UNKNOWN (exit status 2) even when every outcome that finished passed, and
// junit.xml has a failure then too: a case "run" that says it was
// interrupted (it only named UNKNOWN in the root, with no failing case).
func TestInterruptedJUnitFails(t *testing.T) {
	r := &reports.Run{Interrupted: true, Outcomes: []*scenarios.Outcome{{Scenario: "fenced-lock/baseline", Impl: "prim", Build: "redis-8.0",
		Verdict: scenarios.Pass, Results: []scenarios.PropertyResult{{Checker: "exclusion", Expect: "must hold", Verdict: scenarios.Pass,
			Result: models.Result{Checker: "exclusion", Verdict: models.Pass}}}}}}
	var b bytes.Buffer
	if err := reports.WriteJUnit(&b, r); err != nil {
		t.Fatal(err)
	}
	var junit struct {
		Name     string `xml:"name,attr"`
		Failures int    `xml:"failures,attr"`
		Suites   []struct {
			Name     string `xml:"name,attr"`
			Failures int    `xml:"failures,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b.Bytes(), &junit); err != nil {
		t.Fatal(err)
	}
	if r.Overall().ExitStatus() != 2 || junit.Failures != 1 || junit.Name != "coordtorture: overall UNKNOWN" {
		t.Fatalf("interrupted run, exit status %d: junit has %d failures, name %q\n%s", r.Overall().ExitStatus(), junit.Failures, junit.Name, b.String())
	}
	last := junit.Suites[len(junit.Suites)-1]
	if last.Failures != 1 || len(last.Cases) != 1 || last.Cases[0].Name != "run" || last.Cases[0].Failure == nil ||
		!strings.HasPrefix(last.Cases[0].Failure.Message, "interrupted: ") {
		t.Errorf("no failing case says the run was interrupted:\n%s", b.String())
	}
}

// TestPagePlurals: index.html counts in the right plural ("1 scenario run",
// "1 nemesis event"; it said "scenario run(s)", "nemesis event(s)").
func TestPagePlurals(t *testing.T) {
	r := comparisonRun()
	r.Outcomes = r.Outcomes[:1]
	r.Outcomes[0].Events = []scenarios.EventLog{{At: time.Second, End: 2 * time.Second, Name: "pause n1", Kind: models.NemesisFault}}
	var b bytes.Buffer
	if err := reports.WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "(s)") || !strings.Contains(page, "1 scenario run") || !strings.Contains(page, "1 nemesis event") {
		i := strings.Index(page, "(s)")
		t.Errorf("index.html: %q", page[max(0, i-80):min(len(page), i+20)])
	}
	// Its evidence and the timeline's hover texts give an operation's times
	// in seconds, as summary.txt does (they gave "[3034000000, 3035500000]").
	if strings.Contains(page, "3034000000") || !strings.Contains(page, "[3.034s – 3.035s]") {
		i := strings.Index(page, "3034000000")
		t.Errorf("index.html gives an operation's times in ns: %q", page[max(0, i-80):min(len(page), i+40)])
	}
}

// TestSummaryNamesTheRunsThatSetTheVerdict: the summary's last lines name
// the runs that set a non-PASS overall verdict (the deciding
// implementation's runs of that verdict, with their seeds), before the
// overall line; a comparison peer's FAIL is not one of them, and a PASS
// names none.
func TestSummaryNamesTheRunsThatSetTheVerdict(t *testing.T) {
	o := func(name, impl string, v scenarios.Verdict, seed int64) *scenarios.Outcome {
		return &scenarios.Outcome{Scenario: name, Impl: impl, Build: "redis-8.0", Seed: seed, Verdict: v, Duration: time.Second}
	}
	r := &reports.Run{Outcomes: []*scenarios.Outcome{
		o("fenced-lock/baseline", "prim", scenarios.Pass, 1),
		o("fenced-lock/latency", "prim", scenarios.Unknown, 2),
		o("fenced-lock/pause-client", "redislock", scenarios.Fail, 3),
		o("fenced-lock/kill-restart-noaof", "prim", scenarios.Hazard, 4),
		o("rwlock/pause-primary", "prim", scenarios.Unknown, 5),
	}}
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return reports.WriteSummary(b, r) },
		func(b *bytes.Buffer) error { return reports.WriteTerminalSummary(b, r) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
		last2 := strings.Join(lines[len(lines)-2:], "\n")
		want := "UNKNOWN set by: fenced-lock/latency [prim, redis-8.0, seed 2]; rwlock/pause-primary [prim, redis-8.0, seed 5]\noverall: UNKNOWN"
		if !strings.HasPrefix(last2, want) {
			t.Errorf("the summary ends with\n%s\nwant\n%s…", last2, want)
		}
	}
	r.Outcomes = r.Outcomes[:1]
	var b bytes.Buffer
	if err := reports.WriteSummary(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "set by") {
		t.Errorf("a PASS names runs that set it:\n%s", b.String())
	}
}

// TestPeersRowSaysWhyNoHazard: on a hazard scenario where prim shows the
// HAZARD, a peer's PASS row says why it shows none — its token order had
// nothing to check, the other hazard properties held (not shown) — so the
// peer's PASS does not read as the better result; a scenario without a
// hazard gets no note.
func TestPeersRowSaysWhyNoHazard(t *testing.T) {
	res := func(checker, expect string, v scenarios.Verdict) scenarios.PropertyResult {
		return scenarios.PropertyResult{Checker: checker, Expect: expect, Verdict: v}
	}
	r := &reports.Run{Outcomes: []*scenarios.Outcome{
		{Scenario: "fenced-lock/kill-restart-noaof", Impl: "prim", Build: "redis-8.0", Verdict: scenarios.Hazard, Hazard: "shown",
			Results: []scenarios.PropertyResult{res("token-order", "may show hazard", scenarios.Hazard), res("exclusion", "may show hazard", scenarios.Pass)}},
		{Scenario: "fenced-lock/kill-restart-noaof", Impl: "redislock", Build: "redis-8.0", Verdict: scenarios.Pass, Hazard: "not shown",
			Results: []scenarios.PropertyResult{res("token-order", "may show hazard", scenarios.NA), res("exclusion", "may show hazard", scenarios.Pass),
				res("progress", "must hold", scenarios.Pass)}},
		{Scenario: "fenced-lock/baseline", Impl: "redislock", Build: "redis-8.0", Verdict: scenarios.Pass,
			Results: []scenarios.PropertyResult{res("token-order", "must hold", scenarios.NA), res("exclusion", "must hold", scenarios.Pass)}},
	}}
	var b bytes.Buffer
	if err := reports.WriteSummary(&b, r); err != nil {
		t.Fatal(err)
	}
	var peer, baseline string
	for _, l := range strings.Split(b.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "fenced-lock/kill-restart-noaof") && strings.Contains(l, "redislock"):
			peer = l
		case strings.HasPrefix(l, "fenced-lock/baseline") && strings.Contains(l, "redislock"):
			baseline = l
		}
	}
	if want := "(no hazard: token-order: nothing to check; exclusion: not shown)"; !strings.Contains(peer, want) {
		t.Errorf("the peer's row %q does not say %q", peer, want)
	}
	if baseline == "" || strings.Contains(baseline, "no hazard") {
		t.Errorf("the baseline's row %q: want a row without a hazard note", baseline)
	}
}
