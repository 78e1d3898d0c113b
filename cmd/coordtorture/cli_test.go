package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed"
)

func build() string {
	if m := testbed.Matrix(); len(m) == 1 {
		return m[0]
	}
	return testbed.DefaultBuild
}

func TestCLI(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"list"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "fenced-lock/pause-client") {
		t.Fatalf("list: %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "-duration") {
		t.Fatalf("help: %d\n%s", code, out.String())
	}
	for _, bad := range [][]string{{"frobnicate"}, {"run", "no-such-scenario"}, {"run", "--server", "redis-6.2", "fenced-lock/baseline"},
		{"run", "--duration", "-1s"}, {"run", "--provider", "docker"}, {"run", "--impl", "nope", "--duration", "1s", "fenced-lock/baseline"},
		{"run", "--impl", "redislock", "waiting-lock/handoff"}, {"run", "--impl", "prim,nope", "fenced-lock/baseline"}} {
		errb.Reset()
		if code := run(bad, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", bad, code, errb.String())
		}
	}
}

func TestRunWritesReportAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"run", "--server", build(), "--duration", "2s", "--seed", "3", "--out", filepath.Join(dir, "ok"), "fenced-lock/baseline"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("baseline: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	for _, f := range []string{"summary.txt", "report.json", "junit.xml", "histories/fenced-lock__baseline.prim." + build() + ".jsonl.gz"} {
		if st, err := os.Stat(filepath.Join(dir, "ok", f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	junit, _ := os.ReadFile(filepath.Join(dir, "ok", "junit.xml"))
	ss, _ := scenarios.Match([]string{"fenced-lock/baseline"})
	if len(ss) != 1 || len(ss[0].Properties) < 7 { // fenced-resource, token-order, exclusion, lease-protocol, no-phantom-owner, progress, leaks
		t.Fatalf("fenced-lock/baseline: %v", ss)
	}
	if n := strings.Count(string(junit), "<testcase"); n != len(ss[0].Properties) {
		t.Fatalf("junit has %d test cases, want one per property (%d):\n%s", n, len(ss[0].Properties), junit)
	}
	out.Reset()
	if code := run([]string{"replay", filepath.Join(dir, "ok")}, &out, &errb); code != 0 || !strings.Contains(out.String(), "nothing to replay") {
		t.Fatalf("replay of a passing run: %d %s", code, out.String())
	}
	// An unfenced peer under client pauses accepts stale writes: FAIL, exit 1,
	// and its replay re-runs the same seed.
	out.Reset()
	args = []string{"run", "--server", build(), "--impl", "redislock", "--duration", "3s", "--seed", "3", "--out", filepath.Join(dir, "bad"), "fenced-lock/pause-client"}
	if code := run(args, &out, &errb); code != 1 {
		t.Fatalf("redislock pause-client: exit %d, want 1\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "stale write accepted") {
		t.Fatalf("summary does not show the evidence:\n%s", out.String())
	}
	// replay re-runs only what failed for prim unless asked: a peer's FAIL
	// is an expected finding.
	out.Reset()
	if code := run([]string{"replay", filepath.Join(dir, "bad")}, &out, &errb); code != 0 || !strings.Contains(out.String(), "nothing to replay") ||
		!strings.Contains(out.String(), "--all replays them") {
		t.Fatalf("replay of a peer's failure: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"replay", "--all", "--out", filepath.Join(dir, "replay"), filepath.Join(dir, "bad")}, &out, &errb); code != 1 || !strings.Contains(out.String(), "seed 3") {
		t.Fatalf("replay --all: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"replay", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "failed for prim") || !strings.Contains(out.String(), "-all") {
		t.Fatalf("replay --help: exit %d\n%s", code, out.String())
	}
}

// TestReplayPrimOnly: replay re-runs prim's FAIL and UNKNOWN outcomes and
// skips the mutants' and peers' (saying so) unless --all.
func TestReplayPrimOnly(t *testing.T) {
	dir := t.TempDir()
	prev := `{"outcomes":[` +
		`{"scenario":"fenced-lock/baseline","build":"` + build() + `","impl":"prim","seed":7,"clients":2,"duration_ns":1000000000,"verdict":"UNKNOWN","properties":null,"events":null,"ops":0,"uncertain":{},"provider":"local"},` +
		`{"scenario":"fenced-lock/baseline","build":"` + build() + `","impl":"mutant-resource-ignores-tokens","seed":7,"clients":2,"duration_ns":1000000000,"verdict":"FAIL","properties":null,"events":null,"ops":0,"uncertain":{},"provider":"local"},` +
		`{"scenario":"fenced-lock/baseline","build":"` + build() + `","impl":"prim","seed":8,"clients":2,"duration_ns":1000000000,"verdict":"HAZARD","properties":null,"events":null,"ops":0,"uncertain":{},"provider":"local"}]}`
	if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte(prev), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"replay", "--out", filepath.Join(dir, "again"), dir}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "1 scenario run(s)") || !strings.Contains(out.String(), "seed 7") ||
		!strings.Contains(out.String(), "[prim, "+build()+"]") || strings.Contains(out.String(), "[mutant-") ||
		!strings.Contains(out.String(), "1 failure(s) of peers or mutants skipped") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// TestMutantsThroughCLI: each deliberately broken implementation, run by the
// command a user types, ends in FAIL (exit 1) with the evidence in the summary.
func TestMutantsThroughCLI(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ impl, checker, evidence string }{
		{"mutant-release-without-owner-check", "exclusion=FAIL", "validity windows overlap"},
		{"mutant-resource-ignores-tokens", "fenced-resource=FAIL", "stale write accepted"},
	} {
		var out, errb bytes.Buffer
		args := []string{"run", "--server", build(), "--impl", tc.impl, "--ttl", "200ms", "--duration", "4s", "--seed", "5",
			"--out", filepath.Join(dir, tc.impl), "fenced-lock/pause-client"}
		if code := run(args, &out, &errb); code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s\n%s", tc.impl, code, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), tc.checker) || !strings.Contains(out.String(), tc.evidence) {
			t.Errorf("%s: summary lacks %q with evidence %q:\n%s", tc.impl, tc.checker, tc.evidence, out.String())
		}
	}
}

// TestMissingBuild: a known build that was not fetched is a clear error that
// says how to fetch it, before anything runs or is written.
func TestMissingBuild(t *testing.T) {
	t.Setenv("COORDTORTURE_SERVERS_DIR", t.TempDir())
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"run", "--server", "redis-8.0", "--duration", "1s", "--out", filepath.Join(dir, "x"), "fenced-lock/baseline"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "make servers") {
		t.Fatalf("exit %d, stderr %q: want 2 and a hint to run make servers", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("output directory written for a run that could not start: %v", err)
	}
}

// TestImplAllExitsOnPrim: with --impl all the peers' FAILs are shown beside
// prim's PASS, and only prim's verdicts decide the exit status.
func TestImplAllExitsOnPrim(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"run", "--server", build(), "--impl", "all", "--duration", "3s", "--seed", "3",
		"--out", filepath.Join(t.TempDir(), "all"), "fenced-lock/pause-client"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d, want 0 (prim passes)\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"[prim, " + build() + "] PASS", "[redislock, " + build() + "] FAIL", "[redsync, " + build() + "] FAIL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
