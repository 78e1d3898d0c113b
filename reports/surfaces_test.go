package reports_test

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
)

// TestEverySurfaceSameVerdict: summary.txt, junit.xml, index.html and
// report.json state the same verdict for every scenario × property (HAZARD
// a passing JUnit case with its evidence, FAIL and UNKNOWN failing ones
// unless a comparison's), and the same verdict per scenario.
func TestEverySurfaceSameVerdict(t *testing.T) {
	prop := func(checker string, v scenarios.Verdict) scenarios.PropertyResult {
		mv := map[scenarios.Verdict]models.Verdict{scenarios.Pass: models.Pass, scenarios.Hazard: models.Fail,
			scenarios.Fail: models.Fail, scenarios.Unknown: models.Unknown}[v]
		return scenarios.PropertyResult{Checker: checker, Expect: "may show hazard", Verdict: v,
			Result: models.Result{Checker: checker, Verdict: mv, Summary: checker + " summary",
				Evidence: []models.Evidence{{Key: "k", Msg: checker + " evidence", Hazard: v == scenarios.Hazard}}}}
	}
	r := &reports.Run{Outcomes: []*scenarios.Outcome{
		{Scenario: "fenced-lock/kill-restart-noaof", Impl: "prim", Build: "redis-8.0", Seed: 1, Verdict: scenarios.Hazard,
			Results: []scenarios.PropertyResult{prop("fenced-resource", scenarios.Pass), prop("token-order", scenarios.Hazard), prop("progress", scenarios.Pass)}},
		{Scenario: "fenced-lock/kill-restart-noaof", Impl: "mutant-resource-ignores-tokens", Build: "redis-8.0", Seed: 1, Verdict: scenarios.Fail,
			Results: []scenarios.PropertyResult{prop("fenced-resource", scenarios.Fail), prop("token-order", scenarios.Hazard), prop("progress", scenarios.Unknown)}},
		{Scenario: "fenced-lock/partition-primary", Impl: "prim", Build: "redis-8.0", Seed: 2, Verdict: scenarios.Unknown,
			Error:   "1 of the 2 scheduled nemesis events did not happen",
			Results: []scenarios.PropertyResult{prop("exclusion", scenarios.Pass)}},
	}}
	dir := t.TempDir()
	if err := reports.WriteDir(dir, r); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	key := func(o *scenarios.Outcome, checker string) string { return o.Scenario + " [" + o.Impl + "] " + checker }
	want := map[string]string{}
	for _, o := range r.Outcomes {
		want[key(o, "")] = string(o.Verdict)
		for _, p := range o.Results {
			want[key(o, p.Checker)] = string(p.Verdict)
		}
	}
	check := func(surface string, got map[string]string) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s is %q, want %q", surface, k, got[k], v)
			}
		}
	}

	// summary.txt: the table's verdict and properties columns.
	got := map[string]string{}
	for _, line := range strings.Split(read("summary.txt"), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "fenced-lock/") {
			continue
		}
		o := &scenarios.Outcome{Scenario: f[0], Impl: strings.TrimSuffix(f[1], "*")}
		got[key(o, "")] = f[3]
		for _, pv := range f[7:] {
			if c, v, ok := strings.Cut(pv, "="); ok {
				got[key(o, c)] = v
			}
		}
	}
	check("summary.txt", got)

	// junit.xml: a failure for FAIL and UNKNOWN, a pass for PASS and HAZARD,
	// the hazard's evidence in system-out; the run's error its own case.
	var doc struct {
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Out string `xml:"system-out"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(read("junit.xml")), &doc); err != nil {
		t.Fatal(err)
	}
	got = map[string]string{}
	for k, s := range doc.Suites {
		o := r.Outcomes[k]
		worst := []scenarios.Verdict{}
		for _, c := range s.Cases {
			v := "PASS"
			switch {
			case c.Failure != nil:
				v, _, _ = strings.Cut(c.Failure.Message, " ")
				v = strings.TrimSuffix(v, ":")
			case strings.HasPrefix(c.Out, "FAIL") || strings.HasPrefix(c.Out, "UNKNOWN"):
				// A comparison's failure (the mutant beside prim) is shown,
				// not failed.
				v, _, _ = strings.Cut(c.Out, " ")
				v = strings.TrimSuffix(v, ":")
				if !strings.Contains(s.Name, "(comparison") {
					t.Errorf("junit: %s of %s is not a failure", v, s.Name)
				}
			case strings.HasPrefix(c.Out, "HAZARD"):
				v = "HAZARD"
				if !strings.Contains(c.Out, c.Name+" evidence") {
					t.Errorf("junit: the hazard of %s lacks its evidence: %q", c.Name, c.Out)
				}
			}
			worst = append(worst, scenarios.Verdict(v))
			if c.Name != "run" {
				got[key(o, c.Name)] = v
			}
		}
		got[key(o, "")] = string(scenarios.Worst(worst...))
	}
	check("junit.xml", got)

	// index.html: each row's badge and each property's.
	html := read("index.html")
	got = map[string]string{}
	row := regexp.MustCompile(`(?s)<tr id="row-s(\d+)"[^>]*>.*?<span class="v [a-z]+ verdict">([A-Z]+)</span>(.*?)</tr>`)
	li := regexp.MustCompile(`<li class="prop" data-checker="([^"]+)"><span class="v [a-z]+">([A-Z]+)</span>`)
	for _, m := range row.FindAllStringSubmatch(html, -1) {
		var n int
		fmt.Sscan(m[1], &n)
		o := r.Outcomes[n-1]
		got[key(o, "")] = m[2]
		for _, p := range li.FindAllStringSubmatch(m[3], -1) {
			got[key(o, p[1])] = p[2]
		}
	}
	check("index.html", got)

	// report.json: the outcome's verdict, the property's, and its result's.
	var rep struct {
		Outcomes []struct {
			Scenario, Impl, Verdict string
			Properties              []struct {
				Checker, Verdict string
				Result           struct{ Verdict, CheckerVerdict string } `json:"result"`
			}
		}
	}
	if err := json.Unmarshal([]byte(read("report.json")), &rep); err != nil {
		t.Fatal(err)
	}
	got = map[string]string{}
	for _, o := range rep.Outcomes {
		oo := &scenarios.Outcome{Scenario: o.Scenario, Impl: o.Impl}
		got[key(oo, "")] = o.Verdict
		for _, p := range o.Properties {
			got[key(oo, p.Checker)] = p.Verdict
			if p.Result.Verdict != p.Verdict {
				t.Errorf("report.json: %s result verdict %s, property verdict %s", key(oo, p.Checker), p.Result.Verdict, p.Verdict)
			}
		}
	}
	check("report.json", got)
}
