package reports_test

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
)

// naOutcome is a run on a server without a feature its scenario requires
// (scenarios.Feature): N/A, every property N/A with the reason.
func naOutcome(build string) *scenarios.Outcome {
	why := "the server has no hash-field expiry (HPEXPIRE/HPTTL)"
	return &scenarios.Outcome{Scenario: "hash-lease/baseline", Impl: "prim", Build: build, Verdict: scenarios.NA, Unsupported: why,
		Results: []scenarios.PropertyResult{{Checker: "exclusion", Expect: "must hold", Verdict: scenarios.NA,
			Result: models.Result{Checker: "exclusion", Verdict: models.Unknown, Summary: why}}}}
}

func passOutcome(build string) *scenarios.Outcome {
	return &scenarios.Outcome{Scenario: "hash-lease/baseline", Impl: "prim", Build: build, Verdict: scenarios.Pass,
		Results: []scenarios.PropertyResult{{Checker: "exclusion", Expect: "must hold", Verdict: scenarios.Pass,
			Result: models.Result{Checker: "exclusion", Verdict: models.Pass}}}}
}

// TestNAOutcomesLeaveTheVerdict: a run N/A because the server lacks a
// feature (hash-lease on redis-7.0) leaves the overall verdict to the runs
// that checked something (a matrix over builds with and without the
// feature PASSes: exit 0); a run of N/A outcomes only checked nothing:
// UNKNOWN, and the summary's overall line and junit.xml say so.
func TestNAOutcomesLeaveTheVerdict(t *testing.T) {
	matrix := &reports.Run{Outcomes: []*scenarios.Outcome{naOutcome("redis-7.0"), passOutcome("redis-8.0"), naOutcome("valkey-8.1")}}
	if v := matrix.Overall(); v != scenarios.Pass || matrix.CheckedNothing() {
		t.Errorf("N/A beside PASS: overall %s, want PASS", v)
	}
	only := &reports.Run{Outcomes: []*scenarios.Outcome{naOutcome("redis-7.0")}}
	if v := only.Overall(); v != scenarios.Unknown || !only.CheckedNothing() {
		t.Errorf("N/A alone: overall %s, want UNKNOWN", v)
	}
	var sum bytes.Buffer
	if err := reports.WriteSummary(&sum, only); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), "overall: UNKNOWN (every scenario run N/A: nothing was checked; exit status 2)") ||
		strings.Count(sum.String(), "hash-field expiry") != 1 {
		t.Errorf("summary of a run of N/A outcomes (one line for the outcome's reason, the overall line saying why):\n%s", sum.String())
	}
	for _, c := range []struct {
		r        *reports.Run
		failures int
	}{{matrix, 0}, {only, 1}} {
		var b bytes.Buffer
		if err := reports.WriteJUnit(&b, c.r); err != nil {
			t.Fatal(err)
		}
		var junit struct {
			Failures int `xml:"failures,attr"`
		}
		if err := xml.Unmarshal(b.Bytes(), &junit); err != nil {
			t.Fatal(err)
		}
		if junit.Failures != c.failures || (c.failures > 0) != (c.r.Overall().ExitStatus() != 0) {
			t.Errorf("overall %s: junit has %d failures, want %d\n%s", c.r.Overall(), junit.Failures, c.failures, b.String())
		}
	}
}
