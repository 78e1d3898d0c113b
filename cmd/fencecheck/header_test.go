package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// hazardHistory: the nemesis kills n1 at 1s, the restart proves the dataset
// lost at 1.3s, and after it token 5 is accepted from two owners: the hazard
// of a restart without persistence, with its proof.
const hazardHistory = `{"i":1,"proc":9,"type":"invoke","f":"nemesis","key":"fault","value":"kill n1","t":1000000000}
{"i":2,"proc":9,"type":"ok","f":"nemesis","value":"kill n1","t":1100000000}
{"i":3,"proc":9,"type":"invoke","f":"nemesis","key":"effect","value":"dataset lost","t":1300000000}
{"i":4,"proc":9,"type":"ok","f":"nemesis","value":"dataset lost","t":1300000000}
{"i":5,"proc":1,"type":"invoke","f":"write","key":"resource","token":5,"owner":"a","t":2000000000}
{"i":6,"proc":1,"type":"ok","f":"write","key":"resource","t":2100000000}
{"i":7,"proc":2,"type":"invoke","f":"write","key":"resource","token":5,"owner":"b","t":2200000000}
{"i":8,"proc":2,"type":"ok","f":"write","key":"resource","t":2300000000}
`

const hazardHeader = `{"header":"coordtorture","version":1,"scenario":"fenced-lock/kill-restart-noaof","impl":"prim","build":"redis-8.0","seed":1,"nemesis":true,"faults_scheduled":1,"options":{"max_evidence":10},"properties":[{"checker":"fenced-resource","expect":"may-show-hazard","hazard_kinds":["token-reused"]}]}
`

// TestHeaderHazard: with the run's header, a violation of the hazard's kind
// after a fault with a proven effect is HAZARD and exits 0, as the run did;
// without the header the same history is FAIL, as before.
func TestHeaderHazard(t *testing.T) {
	code, out, errs := runCLI(t, hazardHeader+hazardHistory)
	if code != 0 {
		t.Fatalf("exit %d, want 0 (HAZARD)\n%s%s", code, out, errs)
	}
	for _, want := range []string{"header: fenced-lock/kill-restart-noaof [prim, redis-8.0] seed 1",
		"HAZARD  fenced-resource (may show hazard): 1 violation: 1 token-reused (hazard)", "hazard shown, after a fault that had its effect:", "  at 1.3s: dataset lost", "verdict: HAZARD"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := runCLI(t, hazardHistory); code != 1 || !strings.Contains(out, "FAIL    fenced-resource") {
		t.Errorf("without a header: exit %d, want 1\n%s", code, out)
	}
	// The hazard needs its proof: without the effect it is FAIL.
	noEffect := strings.Replace(hazardHistory, `"key":"effect"`, `"key":"event"`, 1)
	h := strings.Replace(hazardHeader, `"faults_scheduled":1`, `"faults_scheduled":2`, 1)
	if code, out, _ := runCLI(t, h+noEffect); code != 1 || !strings.Contains(out, "no fault was seen to have an effect") {
		t.Errorf("without an effect: exit %d, want 1\n%s", code, out)
	}
	// A must-hold property stays FAIL whatever the faults.
	must := strings.Replace(hazardHeader, `"expect":"may-show-hazard"`, `"expect":"must-hold"`, 1)
	if code, out, _ := runCLI(t, must+hazardHistory); code != 1 || !strings.Contains(out, "FAIL    fenced-resource (must hold)") {
		t.Errorf("must hold: exit %d, want 1\n%s", code, out)
	}
	// --json says the judgement beside the checker's verdict.
	code, out, _ = runCLI(t, hazardHeader+hazardHistory, "--json")
	var rep struct {
		Exit  int
		Files []struct {
			Verdict string
			Hazard  string
			Header  struct{ Scenario string }
			Results []struct{ Verdict, Judgement, Expect string }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || rep.Exit != 0 {
		t.Fatalf("json: exit %d %v\n%s", code, err, out)
	}
	f := rep.Files[0]
	if f.Verdict != "HAZARD" || f.Hazard != "shown" || f.Header.Scenario != "fenced-lock/kill-restart-noaof" ||
		f.Results[0].Verdict != "FAIL" || f.Results[0].Judgement != "HAZARD" || f.Results[0].Expect != "may show hazard" {
		t.Fatalf("json: %+v", f)
	}
}

// TestHeaderFaultsNotHappened: a run whose scheduled faults did not all
// happen is UNKNOWN offline too, unless a FAIL stands.
func TestHeaderFaultsNotHappened(t *testing.T) {
	h := strings.Replace(hazardHeader, `"faults_scheduled":1`, `"faults_scheduled":2`, 1)
	code, out, _ := runCLI(t, h+hazardHistory)
	if code != 2 || !strings.Contains(out, "UNKNOWN run: 1 of the 2 scheduled nemesis events did not happen") || !strings.Contains(out, "verdict: UNKNOWN") {
		t.Fatalf("exit %d, want 2\n%s", code, out)
	}
	failed := strings.Replace(hazardHistory, `{"i":2,"proc":9,"type":"ok","f":"nemesis","value":"kill n1","t":1100000000}`,
		`{"i":2,"proc":9,"type":"info","f":"nemesis","err":"kill: no such process","t":1100000000}`, 1)
	if code, out, _ := runCLI(t, hazardHeader+failed); code != 2 || !strings.Contains(out, `nemesis event "kill n1" at 1s failed: kill: no such process`) {
		t.Fatalf("failed event: exit %d, want 2\n%s", code, out)
	}
	none := strings.Replace(hazardHeader, `"faults_scheduled":1`, `"faults_scheduled":0`, 1)
	if code, out, _ := runCLI(t, none+goodHistory); code != 2 || !strings.Contains(out, "no fault was scheduled") {
		t.Fatalf("none scheduled: exit %d, want 2\n%s", code, out)
	}
}

// TestHeaderOptionsAndOverrides: the run's options apply, flags override
// them and say so, and --check replaces the run's properties.
func TestHeaderOptionsAndOverrides(t *testing.T) {
	// B acquires 5 ms before A's ttl runs out: tolerated with a 10ms drift.
	body := `{"i":1,"proc":1,"type":"invoke","f":"acquire","key":"k","ttl_ms":100,"t":0}
{"i":2,"proc":1,"type":"ok","t":1000000}
{"i":3,"proc":2,"type":"invoke","f":"acquire","key":"k","ttl_ms":100,"t":90000000}
{"i":4,"proc":2,"type":"ok","t":95000000}
`
	header := `{"header":"coordtorture","scenario":"x/y","options":{"drift_ns":10000000},"properties":[{"checker":"exclusion","expect":"must-hold"}]}` + "\n"
	code, out, _ := runCLI(t, header+body)
	if code != 0 || !strings.Contains(out, "PASS    exclusion (must hold)") || strings.Contains(out, "token-order") {
		t.Fatalf("header's drift: exit %d, want 0, exclusion only\n%s", code, out)
	}
	code, out, _ = runCLI(t, header+body, "--drift", "0s")
	if code != 1 || !strings.Contains(out, "--drift overrides the run's option") {
		t.Fatalf("--drift 0s: exit %d, want 1 and the override said\n%s", code, out)
	}
	code, out, _ = runCLI(t, header+body, "--check", "exclusion,lease-protocol")
	if !strings.Contains(out, "--check overrides the run's properties") || !strings.Contains(out, "lease-protocol (must hold)") {
		t.Fatalf("--check: exit %d\n%s", code, out)
	}
	if code, _, _ := runCLI(t, body); code != 1 {
		t.Fatalf("without the header: exit %d, want 1 (no drift)", code)
	}
}

// TestHeaderCustomCheck: a scenario's own check is recomputed from the
// history like any other (the verdict and summary an older header recorded
// for it are not repeated), and a checker this fencecheck lacks is
// UNKNOWN, saying so.
func TestHeaderCustomCheck(t *testing.T) {
	header := `{"header":"coordtorture","scenario":"hash-lease/old-server","properties":[` +
		`{"checker":"exclusion","expect":"must-hold"},` +
		`{"checker":"refused-untouched","expect":"must-hold","custom":true,"verdict":"%s","summary":"the refused keys were left alone"},` +
		`{"checker":"no-such-checker","expect":"must-hold"}]}` + "\n"
	// goodHistory's acquisitions were granted: not refused, FAIL whatever
	// the header recorded.
	for _, verdict := range []string{"PASS", "FAIL"} {
		code, out, _ := runCLI(t, strings.Replace(header, "%s", verdict, 1)+goodHistory)
		if code != 1 || strings.Contains(out, "the refused keys were left alone") {
			t.Errorf("recorded %s: exit %d, want 1, the recorded summary not repeated\n%s", verdict, code, out)
		}
		for _, line := range []string{
			"PASS    exclusion (must hold)",
			"FAIL    refused-untouched (must hold): 2 violations: 2 not-refused (FAIL); first: key \"k\": acquisition was ok on a server without hash-field expiry",
			`UNKNOWN no-such-checker (must hold): undecided: this fencecheck has no checker "no-such-checker"`,
		} {
			if !strings.Contains(out, line) {
				t.Errorf("recorded %s: output lacks %q\n%s", verdict, line, out)
			}
		}
	}
}

// A header cannot talk fencecheck out of a violation: a check it has is run
// whatever verdict the header records for it, and a stale write accepted is
// FAIL even when the header names it a hazard kind.
func TestHeaderIsNotBelieved(t *testing.T) {
	stale := `{"i":1,"proc":9,"type":"invoke","f":"nemesis","key":"fault","value":"kill n1","t":1000000000}
{"i":2,"proc":9,"type":"ok","f":"nemesis","value":"kill n1","t":1100000000}
{"i":3,"proc":9,"type":"invoke","f":"nemesis","key":"effect","value":"dataset lost","t":1300000000}
{"i":4,"proc":9,"type":"ok","f":"nemesis","value":"dataset lost","t":1300000000}
{"i":5,"proc":1,"type":"invoke","f":"write","key":"resource","token":7,"owner":"a","t":2000000000}
{"i":6,"proc":1,"type":"ok","f":"write","key":"resource","t":2100000000}
{"i":7,"proc":2,"type":"invoke","f":"write","key":"resource","token":5,"owner":"b","t":2200000000}
{"i":8,"proc":2,"type":"ok","f":"write","key":"resource","t":2300000000}
`
	for name, header := range map[string]string{
		"stale-write named a hazard kind": `{"header":"coordtorture","nemesis":true,"faults_scheduled":1,"properties":[{"checker":"fenced-resource","expect":"may-show-hazard","hazard_kinds":["stale-write","token-reused"]}]}`,
		"a known checker recorded PASS":   `{"header":"coordtorture","nemesis":true,"faults_scheduled":1,"properties":[{"checker":"fenced-resource","expect":"must-hold","custom":true,"verdict":"PASS","summary":"trust me"}]}`,
	} {
		code, out, _ := runCLI(t, header+"\n"+stale)
		if code != 1 || !strings.Contains(out, "FAIL") || strings.Contains(out, "trust me") {
			t.Errorf("%s: exit %d, want 1 (FAIL, the stale write)\n%s", name, code, out)
		}
	}
}
