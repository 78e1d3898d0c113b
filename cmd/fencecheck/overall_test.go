package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
)

// peerHeader: a peer's run of a scenario whose fenced-resource must hold.
const peerHeader = `{"header":"coordtorture","version":1,"scenario":"fenced-lock/baseline","impl":"redsync","build":"redis-8.0","seed":1,"options":{"max_evidence":10},"properties":[{"checker":"fenced-resource","expect":"must-hold"}]}
`

// primFailHeader: prim's run of the same, a violation is FAIL.
const primFailHeader = `{"header":"coordtorture","version":1,"scenario":"fenced-lock/baseline","impl":"prim","build":"redis-8.0","seed":1,"options":{"max_evidence":10},"properties":[{"checker":"fenced-resource","expect":"must-hold"}]}
`

// lastLine is out's last line.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// writeIn writes content to dir/name (dir created) and returns its path.
func writeIn(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOverallOfManyFiles (issue 32, item 8): fencecheck over several files
// ends with one overall line, and its exit status is that verdict's. Files of
// no one run: the worst of them (models.Overall; an unreadable file is
// UNKNOWN). The histories of one run (one run directory's histories/, as
// coordtorture writes them): the run's rule, so fencecheck exits as the run
// did — only prim's verdicts decide when prim ran beside peers or mutants,
// which are named for comparison, or the implementations the run's
// report.json names (overall_from).
func TestOverallOfManyFiles(t *testing.T) {
	// The convention fencecheck recognises is the one coordtorture writes.
	if f := reports.HistoryFile(&scenarios.Outcome{Scenario: "a/b", Impl: "prim", Build: "redis-8.0"}); filepath.Dir(f) != "histories" {
		t.Fatalf("coordtorture writes histories to %s: fencecheck's one-run rule looks for a histories directory", f)
	}

	loose := t.TempDir()
	good := writeIn(t, loose, "good.jsonl", goodHistory)
	good2 := writeIn(t, loose, "good2.jsonl", goodHistory)
	bad := writeIn(t, loose, "bad.jsonl", badHistory)
	broken := writeIn(t, loose, "broken.jsonl", `{"i":1,"proc":1,"type":"maybe","f":"x","t":0}`)
	for _, c := range []struct {
		files []string
		code  int
		want  string
	}{
		{[]string{good, good2}, 0, "overall: PASS (the worst of 2 files; exit status 0)"},
		{[]string{good, bad}, 1, "overall: FAIL (the worst of 2 files; exit status 1)"},
		{[]string{good, broken}, 2, "overall: UNKNOWN (the worst of 2 files; exit status 2)"},
		{[]string{broken, bad, good}, 1, "overall: FAIL (the worst of 3 files; exit status 1)"},
	} {
		code, out, _ := runCLI(t, "", c.files...)
		if code != c.code || lastLine(out) != c.want {
			t.Errorf("%d files: exit %d, last line %q; want %d, %q\n%s", len(c.files), code, lastLine(out), c.code, c.want, out)
		}
		if n := strings.Count(out, "overall:"); n != 1 {
			t.Errorf("%d overall lines, want 1:\n%s", n, out)
		}
	}

	// One run's histories: prim showed its hazard (HAZARD), a peer FAILed.
	run := filepath.Join(t.TempDir(), "run")
	hist := filepath.Join(run, "histories")
	prim := writeIn(t, hist, "fenced-lock__kill-restart-noaof.prim.redis-8.0.jsonl", hazardHeader+hazardHistory)
	peer := writeIn(t, hist, "fenced-lock__baseline.redsync.redis-8.0.jsonl", peerHeader+badHistory)
	code, out, _ := runCLI(t, "", prim, peer)
	if want := "overall: HAZARD (one run's histories, " + run + ": prim's verdicts; exit status 0)"; code != 0 || lastLine(out) != want {
		t.Errorf("one run, prim HAZARD beside a failing peer: exit %d, last line %q; want 0, %q\n%s", code, lastLine(out), want, out)
	}
	if !strings.Contains(out, "\ncomparison (does not set the verdict): redsync FAIL\n") {
		t.Errorf("the peer's verdict is not shown for comparison:\n%s", out)
	}
	// The run's report.json names who decides: its rule is kept.
	writeIn(t, run, "report.json", `{"overall":"FAIL","overall_from":["prim","redsync"]}`)
	code, out, _ = runCLI(t, "", prim, peer)
	if want := "overall: FAIL (one run's histories, " + run + ": prim, redsync's verdicts; exit status 1)"; code != 1 || lastLine(out) != want {
		t.Errorf("one run whose report.json says prim and redsync decide: exit %d, last line %q; want 1, %q\n%s", code, lastLine(out), want, out)
	}
	os.Remove(filepath.Join(run, "report.json"))
	// prim failing fails the run, peers or not.
	primFail := writeIn(t, hist, "fenced-lock__baseline.prim.redis-8.0.jsonl", primFailHeader+badHistory)
	if code, out, _ := runCLI(t, "", prim, primFail, peer); code != 1 || !strings.HasPrefix(lastLine(out), "overall: FAIL (one run's histories") {
		t.Errorf("one run, prim FAIL: exit %d, last line %q", code, lastLine(out))
	}
	// The same files outside a run's directory are no one run's: the worst.
	other := t.TempDir()
	p2 := writeIn(t, other, "prim.jsonl", hazardHeader+hazardHistory)
	r2 := writeIn(t, other, "peer.jsonl", peerHeader+badHistory)
	if code, out, _ := runCLI(t, "", p2, r2); code != 1 || lastLine(out) != "overall: FAIL (the worst of 2 files; exit status 1)" {
		t.Errorf("no run directory: exit %d, last line %q", code, lastLine(out))
	}

	// --json states the overall verdict and who decided it.
	code, out, _ = runCLI(t, "", "--json", prim, peer)
	var rep struct {
		Exit        int
		Overall     string   `json:"overall"`
		OverallFrom []string `json:"overall_from"`
		Run         string   `json:"run"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if code != 0 || rep.Exit != 0 || rep.Overall != "HAZARD" || strings.Join(rep.OverallFrom, ",") != "prim" || rep.Run != run {
		t.Errorf("--json: exit %d, %+v", code, rep)
	}
	// One file: its verdict line, as before; no overall line.
	if _, out, _ := runCLI(t, "", good); strings.Contains(out, "overall:") {
		t.Errorf("one file got an overall line:\n%s", out)
	}
}

// TestOverallOfTwoRunsInOneDir (review finding 1b): RUN/histories/ may hold
// files that are not the run's (an earlier run's, written into the same
// --out before coordtorture removed them). The run's rule applies only to
// the histories RUN/report.json lists: a file it does not list is said to be
// not from that run, and the worst of every file decides; a listed history
// that is not on disk counts UNKNOWN.
func TestOverallOfTwoRunsInOneDir(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	hist := filepath.Join(run, "histories")
	// The second run: prim showed its hazard, a peer (comparison) FAILed.
	prim := writeIn(t, hist, "fenced-lock__kill-restart-noaof.prim.redis-8.0.jsonl.gz", hazardHeader+hazardHistory)
	peer := writeIn(t, hist, "fenced-lock__baseline.redsync.redis-8.0.jsonl.gz", peerHeader+badHistory)
	// The first run's prim FAIL, left in the same directory.
	stale := writeIn(t, hist, "fenced-lock__baseline.prim.redis-8.0.jsonl.gz", primFailHeader+badHistory)
	writeIn(t, run, "report.json", `{"overall":"HAZARD","overall_from":["prim"],"outcomes":[
		{"scenario":"fenced-lock/kill-restart-noaof","impl":"prim","build":"redis-8.0","verdict":"HAZARD"},
		{"scenario":"fenced-lock/baseline","impl":"redsync","build":"redis-8.0","verdict":"FAIL"}]}`)

	// The run's own files: its rule, its verdict.
	code, out, _ := runCLI(t, "", prim, peer)
	if want := "overall: HAZARD (one run's histories, " + run + ": prim's verdicts; exit status 0)"; code != 0 || lastLine(out) != want {
		t.Errorf("the run's files: exit %d, last line %q; want 0, %q\n%s", code, lastLine(out), want, out)
	}
	// With the stale one (histories/*): not from that run, the worst decides.
	code, out, _ = runCLI(t, "", prim, peer, stale)
	if want := "overall: FAIL (the worst of 3 files; exit status 1)"; code != 1 || lastLine(out) != want {
		t.Errorf("with a file of another run: exit %d, last line %q; want 1, %q\n%s", code, lastLine(out), want, out)
	}
	if !strings.Contains(out, "not from that run (its report.json does not list them): fenced-lock__baseline.prim.redis-8.0.jsonl.gz;") {
		t.Errorf("the file of another run is not named as such:\n%s", out)
	}
	// A stale peer's PASS beside the run's: still the worst rule, said.
	stalePass := writeIn(t, hist, "fenced-lock__baseline.redislock.redis-8.0.jsonl.gz", goodHistory)
	if code, out, _ = runCLI(t, "", prim, stalePass); code != 0 || !strings.Contains(out, "not from that run") ||
		lastLine(out) != "overall: HAZARD (the worst of 2 files; exit status 0)" {
		t.Errorf("with a passing file of another run: exit %d\n%s", code, out)
	}
	// A listed history missing from disk: UNKNOWN, as its implementation's
	// verdict (a comparison's does not decide; prim's does).
	os.Remove(stale)
	os.Remove(stalePass)
	os.Remove(peer)
	code, out, _ = runCLI(t, "", prim)
	if code != 0 || !strings.Contains(out, "missing (report.json lists them, not on disk; each counts UNKNOWN): fenced-lock__baseline.redsync.redis-8.0.jsonl.gz") ||
		!strings.Contains(out, "comparison (does not set the verdict): redsync UNKNOWN") || !strings.HasPrefix(lastLine(out), "overall: HAZARD (one run's") {
		t.Errorf("the comparison's history missing: exit %d, want 0 (prim's HAZARD), redsync UNKNOWN\n%s", code, out)
	}
	writeIn(t, hist, filepath.Base(peer), peerHeader+badHistory)
	os.Remove(prim)
	code, out, _ = runCLI(t, "", peer)
	if code != 2 || !strings.Contains(out, "missing (report.json lists them, not on disk; each counts UNKNOWN): fenced-lock__kill-restart-noaof.prim.redis-8.0.jsonl.gz") ||
		!strings.HasPrefix(lastLine(out), "overall: UNKNOWN (one run's histories") {
		t.Errorf("prim's history missing: exit %d, want 2 (UNKNOWN)\n%s", code, out)
	}
}
