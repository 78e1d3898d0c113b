package reports_test

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
)

func sample() *reports.Run {
	res := func(checker string, v scenarios.Verdict, mv models.Verdict) scenarios.PropertyResult {
		return scenarios.PropertyResult{Checker: checker, Expect: "must hold", Verdict: v,
			Result: models.Result{Checker: checker, Verdict: mv, Summary: checker + " summary",
				Evidence: []models.Evidence{{Key: "k", Msg: checker + " evidence"}}}}
	}
	return &reports.Run{Outcomes: []*scenarios.Outcome{
		{Scenario: "fenced-lock/a", Impl: "prim", Build: "redis-8.0", Seed: 1, Verdict: scenarios.Pass,
			Results: []scenarios.PropertyResult{res("exclusion", scenarios.Pass, models.Pass)},
			Records: []history.Op{{I: 0, Process: 0, Type: history.Invoke, F: "acquire", Key: "k"}, {I: 1, Process: 0, Type: history.OK, F: "acquire", Key: "k", Token: 1, T: 5}}},
		{Scenario: "fenced-lock/b", Impl: "redislock", Build: "redis-8.0", Seed: 2, Verdict: scenarios.Fail,
			Results: []scenarios.PropertyResult{res("fenced-resource", scenarios.Fail, models.Fail), res("token-order", scenarios.Hazard, models.Fail)}},
	}}
}

func TestJUnitOneCasePerProperty(t *testing.T) {
	var b bytes.Buffer
	if err := reports.WriteJUnit(&b, sample()); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Suites []struct {
			Name     string `xml:"name,attr"`
			Failures int    `xml:"failures,attr"`
			Cases    []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("junit is not XML: %v\n%s", err, b.String())
	}
	if len(doc.Suites) != 2 || len(doc.Suites[1].Cases) != 2 || doc.Suites[1].Failures != 0 {
		t.Fatalf("unexpected junit shape: %+v", doc)
	}
	if doc.Suites[1].Cases[0].Failure != nil || doc.Suites[1].Cases[1].Failure != nil {
		t.Fatal("a comparison's FAIL (a peer beside prim) must not be a junit failure, HAZARD never")
	}
	// The peer alone decides: its FAIL is a failure.
	alone := sample()
	alone.Outcomes = alone.Outcomes[1:]
	b.Reset()
	if err := reports.WriteJUnit(&b, alone); err != nil {
		t.Fatal(err)
	}
	doc.Suites = nil
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Suites) != 1 || doc.Suites[0].Failures != 1 || doc.Suites[0].Cases[0].Failure == nil || doc.Suites[0].Cases[1].Failure != nil {
		t.Fatal("FAIL must be a junit failure and HAZARD must not")
	}
}

func TestSummaryAndDir(t *testing.T) {
	var b bytes.Buffer
	if err := reports.WriteSummary(&b, sample()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fenced-lock/b", "FAIL fenced-lock/b [redislock] (comparison) fenced-resource", "fenced-resource evidence", "peers (comparison, do not set the verdict): redislock FAIL\noverall: PASS (prim's verdicts, exit status 0)\n"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, b.String())
		}
	}
	// One implementation: the overall verdict is its own, said once.
	one := sample()
	one.Outcomes = one.Outcomes[:1]
	b.Reset()
	if err := reports.WriteSummary(&b, one); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\noverall: PASS (exit status 0)\n") {
		t.Fatalf("one implementation's summary ends:\n%s", b.String())
	}
	dir := t.TempDir()
	r := sample()
	if err := reports.WriteDir(dir, r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, reports.HistoryFile(r.Outcomes[0])))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := history.Read(f)
	if err != nil || len(h.Ops) != 1 || h.Ops[0].Token != 1 {
		t.Fatalf("history round trip: %v %+v", err, h)
	}
}

func TestJUnitRunErrorIsAFailingCase(t *testing.T) {
	r := &reports.Run{Outcomes: []*scenarios.Outcome{{Scenario: "fenced-lock/failover-forced", Impl: "prim", Build: "redis-8.0",
		Verdict: scenarios.Unknown, Error: "nemesis event \"SENTINEL FAILOVER\" at 2s failed: timed out\nmore"}}}
	var b bytes.Buffer
	if err := reports.WriteJUnit(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `<testcase name="run"`) || !strings.Contains(b.String(), `failures="1"`) ||
		!strings.Contains(b.String(), "UNKNOWN: nemesis event") {
		t.Fatalf("no failing run case:\n%s", b.String())
	}
}

// A rate limiter's run has no acquisitions or writes: its grants are what the
// run line and the table count (they said "0 acquisitions, 0 writes" and "-").
func TestCompletedCountsGrants(t *testing.T) {
	o := &scenarios.Outcome{Scenario: "ratelimit/fixed/baseline", Impl: "prim", Build: "redis-8.0", Verdict: scenarios.Pass,
		Duration: 2e9, Ops: 4, Records: []history.Op{
			{Type: history.OK, F: history.FAllow}, {Type: history.OK, F: history.FAllowWait},
			{Type: history.Fail, F: history.FAllow}, {Type: history.OK, F: history.FAllow},
		}}
	c := reports.CountCompleted(o)
	if c.Grants != 3 || c.String() != "3 grants" {
		t.Fatalf("%+v %q, want 3 grants", c, c.String())
	}
	var b bytes.Buffer
	if err := reports.WriteSummary(&b, &reports.Run{Outcomes: []*scenarios.Outcome{o}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "PASS     1.5 ") {
		t.Fatalf("the table does not show 1.5 grants/s:\n%s", b.String())
	}
}
