package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodHistory = `{"i":1,"proc":1,"type":"invoke","f":"acquire","key":"k","t":0}
{"i":2,"proc":1,"type":"ok","f":"acquire","key":"k","token":1,"owner":"a","ttl_ms":100,"t":1000000}
{"i":3,"proc":1,"type":"invoke","f":"write","key":"r","token":1,"value":"v1","t":2000000}
{"i":4,"proc":1,"type":"ok","f":"write","key":"r","t":3000000}
{"i":5,"proc":1,"type":"invoke","f":"release","key":"k","owner":"a","t":4000000}
{"i":6,"proc":1,"type":"ok","f":"release","key":"k","value":"released","t":5000000}
{"i":7,"proc":2,"type":"invoke","f":"acquire","key":"k","t":6000000}
{"i":8,"proc":2,"type":"ok","f":"acquire","key":"k","token":2,"owner":"b","ttl_ms":100,"t":7000000}
{"i":9,"proc":2,"type":"invoke","f":"write","key":"r","token":2,"value":"v2","t":8000000}
{"i":10,"proc":2,"type":"ok","f":"write","key":"r","t":9000000}
`

// badHistory: proc 2 acquires while proc 1 holds the lease, its token goes
// backwards, and the resource accepts the stale write.
const badHistory = `{"i":1,"proc":1,"type":"invoke","f":"acquire","key":"k","t":0}
{"i":2,"proc":1,"type":"ok","f":"acquire","key":"k","token":5,"owner":"a","ttl_ms":100,"t":1000000}
{"i":3,"proc":2,"type":"invoke","f":"acquire","key":"k","t":2000000}
{"i":4,"proc":2,"type":"ok","f":"acquire","key":"k","token":3,"owner":"b","ttl_ms":100,"t":3000000}
{"i":5,"proc":1,"type":"invoke","f":"write","key":"r","token":5,"t":4000000}
{"i":6,"proc":1,"type":"ok","f":"write","key":"r","t":5000000}
{"i":7,"proc":2,"type":"invoke","f":"write","key":"r","token":3,"t":6000000}
{"i":8,"proc":2,"type":"ok","f":"write","key":"r","t":7000000}
`

func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPass(t *testing.T) {
	code, out, errs := runCLI(t, "", writeFile(t, "good.jsonl", goodHistory))
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"PASS    fenced-resource", "PASS    token-order", "PASS    exclusion"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "latch") {
		t.Errorf("ran a checker that does not apply:\n%s", out)
	}
}

func TestFailFromStdin(t *testing.T) {
	for _, args := range [][]string{nil, {"-"}} {
		code, out, _ := runCLI(t, badHistory, args...)
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, out)
		}
		for _, want := range []string{"FAIL    exclusion", "FAIL    token-order", "FAIL    fenced-resource", "stale write accepted", "#3 proc 2 acquire"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
}

func TestCheckSelection(t *testing.T) {
	code, out, _ := runCLI(t, badHistory, "--check", "fenced-resource")
	if code != 1 || strings.Contains(out, "exclusion") || !strings.Contains(out, "fenced-resource") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, goodHistory, "--check=latch")
	if code != 0 || !strings.Contains(out, "PASS    latch") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	code, _, errs := runCLI(t, goodHistory, "--check", "exclusion,bogus")
	if code != 2 || !strings.Contains(errs, `unknown checker "bogus"`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

func TestBadInput(t *testing.T) {
	bad := strings.Replace(goodHistory, `"type":"ok","f":"write","key":"r","t":3000000`, `"type":"ok","f":"write","key":"r","t":30`, 1)
	code, out, errs := runCLI(t, bad)
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errs, "<stdin>: line 4, column 55: time goes backwards") || !strings.Contains(out, "UNKNOWN line 4") {
		t.Errorf("stderr %q\nstdout %q", errs, out)
	}
	code, _, errs = runCLI(t, "", filepath.Join(t.TempDir(), "missing.jsonl"))
	if code != 2 || !strings.Contains(errs, "no such file") {
		t.Errorf("missing file: exit %d: %s", code, errs)
	}
	code, _, errs = runCLI(t, "{\n")
	if code != 2 || !strings.Contains(errs, "line 1") {
		t.Errorf("bad JSON: exit %d: %s", code, errs)
	}
	code, out, _ = runCLI(t, "")
	if code != 2 || !strings.Contains(out, "no checker applies") {
		t.Errorf("empty input: exit %d: %s", code, out)
	}
	code, _, _ = runCLI(t, "", "--no-such-flag")
	if code != 2 {
		t.Errorf("bad flag: exit %d", code)
	}
}

func TestJSON(t *testing.T) {
	good := writeFile(t, "good.jsonl", goodHistory)
	bad := writeFile(t, "bad.jsonl", badHistory)
	broken := writeFile(t, "broken.jsonl", `{"i":1,"proc":1,"type":"maybe","f":"x","t":0}`)
	code, out, _ := runCLI(t, "", "--json", good, bad, broken)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (a violation wins)", code)
	}
	var rep struct {
		Exit  int
		Files []struct {
			File    string
			Records int
			Error   string
			Results []struct {
				Checker    string
				Verdict    string
				Summary    string
				Violations int
				Evidence   []struct {
					Msg string
					Ops []struct {
						I     int64
						Proc  int
						Token int64
						Type  string
					}
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Exit != 1 || len(rep.Files) != 3 {
		t.Fatalf("%+v", rep)
	}
	if f := rep.Files[0]; f.Records != 10 || len(f.Results) != 4 || f.Results[0].Verdict != "PASS" {
		t.Errorf("good: %+v", f)
	}
	var sawOps bool
	for _, r := range rep.Files[1].Results {
		if r.Verdict != "FAIL" || r.Violations == 0 {
			t.Errorf("bad: %+v", r)
		}
		for _, e := range r.Evidence {
			for _, op := range e.Ops {
				if op.Proc == 2 && op.Token == 3 && op.Type == "ok" {
					sawOps = true
				}
			}
		}
	}
	if !sawOps {
		t.Error("evidence lacks the operations")
	}
	if f := rep.Files[2]; !strings.Contains(f.Error, "line 1, column 24: unknown record type") {
		t.Errorf("broken: %+v", f)
	}
}

func TestHTML(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "viz")
	code, out, _ := runCLI(t, badHistory, "--html", dir, "--check", "token-order")
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(filepath.Join(dir, "stdin.token-order.html"))
	if err != nil || !bytes.Contains(b, []byte("<html")) {
		t.Fatalf("visualization: %v (%d bytes)\n%s", err, len(b), out)
	}
	if !strings.Contains(out, "visualization: ") {
		t.Errorf("path not printed:\n%s", out)
	}
}

func TestUnknownExit(t *testing.T) {
	// A semaphore without a capacity cannot be judged.
	h := `{"i":1,"proc":1,"type":"invoke","f":"sem_acquire","key":"s","ttl_ms":100,"t":0}
{"i":2,"proc":1,"type":"ok","t":10}
`
	code, out, _ := runCLI(t, h)
	if code != 2 || !strings.Contains(out, "UNKNOWN semaphore") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if code, _, _ := runCLI(t, h, "--capacity", "1"); code != 0 {
		t.Errorf("with --capacity: exit %d", code)
	}
}

func TestFlagsReachTheCheckers(t *testing.T) {
	// B acquires 5 ms before A's ttl runs out: tolerated with --drift 10ms.
	h := `{"i":1,"proc":1,"type":"invoke","f":"acquire","key":"k","ttl_ms":100,"t":0}
{"i":2,"proc":1,"type":"ok","t":1000000}
{"i":3,"proc":2,"type":"invoke","f":"acquire","key":"k","ttl_ms":100,"t":90000000}
{"i":4,"proc":2,"type":"ok","t":95000000}
`
	if code, _, _ := runCLI(t, h); code != 1 {
		t.Errorf("without drift: exit %d", code)
	}
	if code, out, _ := runCLI(t, h, "--drift", "10ms"); code != 0 {
		t.Errorf("with drift: exit %d\n%s", code, out)
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runCLI(t, "", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"FORMAT.md", "Exit status", "fenced-resource", "token-order", "liveness", "leaks", "-drift", "-html", "-timeout"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
