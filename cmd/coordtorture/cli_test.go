package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/reports"
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
		{"run", "--duration", "-1s"}, {"run", "--provider", "nope", "fenced-lock/baseline"},
		{"run", "--image", "redis:8.0", "fenced-lock/baseline"}, {"run", "--provider", "docker", "--server-bin", "/bin/true", "fenced-lock/baseline"},
		{"run", "--provider", "docker", "--addr", "127.0.0.1:1", "fenced-lock/baseline"}, {"run", "--impl", "nope", "--duration", "1s", "fenced-lock/baseline"},
		{"run", "--impl", "redislock", "waiting-lock/handoff"}, {"run", "--impl", "prim,nope", "fenced-lock/baseline"}} {
		errb.Reset()
		if code := run(bad, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", bad, code, errb.String())
		}
	}
}

// TestUsageErrors: what the CLI refuses, it refuses with exit 2 and one
// message that names the culprit, before running anything: a pattern that
// matches nothing (even beside one that matches: it was dropped silently), a
// flag a command does not take, --clients 0; an unknown command shows the
// usage.
func TestUsageErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "fenced-lock/baseline", "fenced-lock/baselin", "--duration", "1s", "--out", out}, `no scenario matches "fenced-lock/baselin" (did you mean "fenced-lock/baseline"?)`},
		{[]string{"run", "nope", "--duration", "1s", "--out", out}, `coordtorture run: no scenario matches "nope"; coordtorture list shows them`},
		{[]string{"run", "--clients", "0", "--out", out, "fenced-lock/baseline"}, "--clients 0"},
		{[]string{"run", "--duration", "0s", "--out", out}, "--duration 0s"},
		{[]string{"run", "--bogus", "--out", out}, "flag provided but not defined: -bogus (see coordtorture run --help)"},
		{[]string{"replay", "--duration", "1s", out}, "flag provided but not defined: -duration"},
		{[]string{"matrix", "--server", "redis-8.0", "--out", out}, "flag provided but not defined: -server"},
		{[]string{"replay", out, out}, "takes one run directory, got 2"},
		{[]string{"list", "fenced-lock/nope"}, `no scenario matches "fenced-lock/nope"`},
		{[]string{"frobnicate"}, "unknown command \"frobnicate\"\n\ncoordtorture — torture"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout.String(), stderr.String(), tc.want)
		}
		if first, _, _ := strings.Cut(stderr.String(), "\n"); strings.Count(stderr.String(), first) != 1 {
			t.Errorf("%v: the error is printed more than once: %q", tc.args, stderr.String())
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused command wrote %s: %v", out, err)
	}
}

// TestHelp: each command's --help exits 0 on stdout alone, describes its
// positional arguments and lists the flags it takes, and only those.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		cmd       string
		want, not []string
	}{
		{"run", []string{"Usage: coordtorture run [flags] [PATTERN…]", "flags and\npatterns may come in any order", "Exit status", "-duration", "-server", "-addr", "-seed"}, []string{"\n  -all"}},
		{"matrix", []string{"Usage: coordtorture matrix [flags] [PATTERN…]", "every fetched\nserver build", "-duration", "-impl"}, []string{"\n  -server", "\n  -addr", "\n  -provider", "\n  -all"}},
		{"replay", []string{"Usage: coordtorture replay [flags] DIR", "prints each seed", "-all", "-out", "-ttl"}, []string{"\n  -duration", "\n  -seed", "\n  -impl", "\n  -clients", "\n  -server"}},
		{"list", []string{"Usage: coordtorture list [PATTERN…]", "No flags"}, []string{"\n  -out"}},
	} {
		for _, h := range []string{"--help", "-h"} {
			var stdout, stderr bytes.Buffer
			if code := run([]string{tc.cmd, "fenced-lock/baseline", h}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
				t.Errorf("%s %s: exit %d, stderr %q", tc.cmd, h, code, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("%s %s lacks %q:\n%s", tc.cmd, h, w, stdout.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(stdout.String(), n) {
					t.Errorf("%s %s lists %q, which it does not take:\n%s", tc.cmd, h, n, stdout.String())
				}
			}
		}
	}
}

// TestFlagsAfterPatterns: flags after a scenario name apply (they were
// ignored: --duration 1s ran 10s and --out went to runs/<time>).
func TestFlagsAfterPatterns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "late")
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"run", "fenced-lock/baseline", "--duration", "1s", "--server", build(), "--seed", "11", "--out", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatalf("--out after the pattern was not used: %v", err)
	}
	var rep reports.Run
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Outcomes) != 1 || rep.Outcomes[0].Duration != time.Second || rep.Outcomes[0].Seed != 11 {
		t.Fatalf("the flags after the pattern were not applied: %v %+v", err, rep.Outcomes)
	}
	if el := time.Since(start); el > 60*time.Second {
		t.Errorf("a 1s run took %v", el)
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
	// The peer ran alone: its FAIL set the run's verdict and exit status,
	// and replay re-runs it (seed shown) to the same exit status.
	out.Reset()
	if code := run([]string{"replay", "--out", filepath.Join(dir, "replay"), filepath.Join(dir, "bad")}, &out, &errb); code != 1 ||
		!strings.Contains(out.String(), "[redislock, "+build()+"] seed 3, 3s, 8 clients") {
		t.Fatalf("replay: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"replay", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "set that run's verdict") || !strings.Contains(out.String(), "-all") {
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
	if code != 0 || !strings.Contains(out.String(), "replaying 1 scenario run,") || !strings.Contains(out.String(), "seed 7, 1s, 2 clients") ||
		!strings.Contains(out.String(), "[prim, "+build()+"]") || strings.Contains(out.String(), "[mutant-") ||
		!strings.Contains(out.String(), "1 failure of the comparison's peers or mutants skipped") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// TestReplayKeepsTTL: a replay runs each scenario at the lease duration of
// the run it replays (report.json's ttl_ns), unless --ttl is given: the
// schedule of a scenario stated against the lease depends on it. Here the
// replayed run was refused (2s is too short for redlock/node-loss at a 1s
// lease) and its replay is refused again for the same reason, starting
// nothing; at the default 500ms it would have run.
func TestReplayKeepsTTL(t *testing.T) {
	dir := t.TempDir()
	prev := `{"outcomes":[{"scenario":"redlock/node-loss","build":"` + build() + `","impl":"prim","seed":7,"clients":2,` +
		`"duration_ns":2000000000,"ttl_ns":1000000000,"verdict":"UNKNOWN","properties":null,"events":null,"ops":0,"uncertain":{},"provider":"local"}]}`
	if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte(prev), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	again := filepath.Join(dir, "again")
	code := run([]string{"replay", "--out", again, dir}, &out, &errb)
	b, err := os.ReadFile(filepath.Join(again, "report.json"))
	if err != nil {
		t.Fatalf("replay: exit %d, %v\n%s\n%s", code, err, out.String(), errb.String())
	}
	var rep struct {
		Outcomes []struct {
			TTL   time.Duration `json:"ttl_ns"`
			Error string        `json:"error"`
		} `json:"outcomes"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Outcomes) != 1 {
		t.Fatalf("report.json of the replay: %v %s", err, b)
	}
	if o := rep.Outcomes[0]; o.TTL != time.Second || !strings.Contains(o.Error, "not run") || !strings.Contains(o.Error, "--ttl 1s") {
		t.Fatalf("replay: exit %d, ttl %v, error %q: want the run's 1s lease, refused again\n%s", code, o.TTL, o.Error, out.String())
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
	dir := filepath.Join(t.TempDir(), "all")
	args := []string{"run", "--server", build(), "--impl", "all", "--duration", "3s", "--seed", "3",
		"--out", dir, "fenced-lock/pause-client"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d, want 0 (prim passes)\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"[prim, " + build() + "] PASS", "[redislock, " + build() + "] FAIL", "[redsync, " + build() + "] FAIL",
		"peers (comparison, do not set the verdict): redislock FAIL, redsync FAIL\noverall: PASS (prim's verdicts, exit status 0)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Every surface agrees: summary.txt, junit (no failure), and a replay,
	// which has nothing of prim's to re-run (it exited 1 after such a run).
	sum, _ := os.ReadFile(filepath.Join(dir, "summary.txt"))
	junit, _ := os.ReadFile(filepath.Join(dir, "junit.xml"))
	if !strings.HasSuffix(string(sum), "overall: PASS (prim's verdicts, exit status 0)\n") || !strings.Contains(string(junit), `<testsuites name="coordtorture: overall PASS" tests="21" failures="0"`) {
		t.Errorf("summary.txt or junit.xml disagree with the exit status:\n%s\n%s", sum, junit)
	}
	out.Reset()
	if code := run([]string{"replay", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "nothing to replay") ||
		!strings.Contains(out.String(), "2 failures of the comparison's peers or mutants skipped") {
		t.Errorf("replay: exit %d\n%s", code, out.String())
	}
	// replay --all re-runs the peers' failures, still as a comparison: the
	// run's rule stands, and so does its exit status.
	out.Reset()
	if code := run([]string{"replay", "--all", "--out", filepath.Join(dir, "again"), dir}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "peers (comparison, do not set the verdict): redislock ") || !strings.Contains(out.String(), "seed 3, 3s, 8 clients") {
		t.Errorf("replay --all: exit %d\n%s", code, out.String())
	}
}

// TestReplayKeepsOverallFrom: a report.json that says prim decided (a
// replay --all of an --impl all run where only the peers failed: overall
// PASS, exit 0) replays nothing of it without --all: the peer's FAIL is still
// a comparison, as report.json's overall_from states (replay read it as the
// peer's own run, re-ran the failure and exited 1).
func TestReplayKeepsOverallFrom(t *testing.T) {
	dir := t.TempDir()
	prev := `{"outcomes":[` +
		`{"scenario":"fenced-lock/baseline","build":"` + build() + `","impl":"redislock","seed":7,"clients":2,"duration_ns":1000000000,"verdict":"FAIL","properties":null,"events":null,"ops":0,"uncertain":{},"provider":"local"}],` +
		`"overall":"PASS","overall_from":["prim"],"comparison":["redislock"]}`
	if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte(prev), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"replay", "--out", filepath.Join(dir, "again"), dir}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "nothing to replay: no scenario of that run failed for prim") ||
		!strings.Contains(out.String(), "1 failure of the comparison's peers or mutants skipped") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// TestReplayInterrupted: an interrupted run exited 2 (UNKNOWN: not every
// scenario ran) though every outcome that finished passed; its replay says
// it was interrupted and exits as the run did (it said "nothing to replay"
// and exited 0).
func TestReplayInterrupted(t *testing.T) {
	dir := t.TempDir()
	prev := `{"command":"coordtorture run fenced-lock/*","interrupted":true,"outcomes":[` +
		`{"scenario":"fenced-lock/baseline","build":"` + build() + `","impl":"prim","seed":7,"clients":2,"duration_ns":1000000000,"verdict":"PASS","properties":null,"events":null,"ops":0,"uncertain":{},"provider":"local"}]}`
	if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte(prev), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"replay", "--out", filepath.Join(dir, "again"), dir}, &out, &errb)
	if code != 2 || !strings.Contains(out.String(), "interrupted") || !strings.Contains(out.String(), "coordtorture run fenced-lock/*") {
		t.Fatalf("replay of an interrupted run: exit %d, want 2 and why\n%s\n%s", code, out.String(), errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "again")); !os.IsNotExist(err) {
		t.Errorf("a replay with nothing to run wrote %s: %v", filepath.Join(dir, "again"), err)
	}
}

// TestKeepRunnable: the provider filters of run keep what can run there,
// name what they leave out, and stop (nil) when a scenario named alone
// cannot run there or nothing is left.
func TestKeepRunnable(t *testing.T) {
	ss, err := selectScenarios([]string{"fenced-lock/baseline", "fenced-lock/clock-skew"})
	if err != nil || len(ss) != 2 {
		t.Fatal(ss, err)
	}
	noSkew := func(s *scenarios.Scenario) error {
		if s.MovesClock() {
			return fmt.Errorf("%s moves a clock", s.Name)
		}
		return nil
	}
	var buf bytes.Buffer
	keep := keepRunnable(&buf, ss, []string{"fenced-lock"}, noSkew, "why", "there")
	if len(keep) != 1 || keep[0].Name != "fenced-lock/baseline" || !strings.Contains(buf.String(), "skipping fenced-lock/clock-skew (why)") {
		t.Fatalf("kept %v, said %q", keep, buf.String())
	}
	// Many left out: one line, counted, the first few named.
	many, err := selectScenarios([]string{"fenced-lock/baseline", "*/clock-skew", "ratelimit/*/clock-skew*"})
	if err != nil || len(many) < skippedShown+2 {
		t.Fatal(many, err)
	}
	buf.Reset()
	keep = keepRunnable(&buf, many, []string{"fenced-lock/baseline", "*/clock-skew"}, noSkew, "why", "there")
	said := strings.TrimSuffix(buf.String(), "\n")
	if len(keep) != 1 || strings.Contains(said, "\n") ||
		!strings.HasPrefix(said, fmt.Sprintf("coordtorture: skipping %d scenarios (why): ", len(many)-1)) ||
		!strings.HasSuffix(said, fmt.Sprintf(" and %d more", len(many)-1-skippedShown)) {
		t.Fatalf("kept %v, said %q: want one line for the skipped scenarios", keep, buf.String())
	}
	buf.Reset()
	if keep := keepRunnable(&buf, ss[1:], []string{"fenced-lock/clock-skew"}, noSkew, "why", "there"); keep != nil ||
		!strings.Contains(buf.String(), "fenced-lock/clock-skew moves a clock") {
		t.Fatalf("named alone: kept %v, said %q", keep, buf.String())
	}
	buf.Reset()
	if keep := keepRunnable(&buf, ss[1:], []string{"*/clock-skew"}, noSkew, "why", "there"); keep != nil ||
		!strings.Contains(buf.String(), "no scenario of that selection runs there") {
		t.Fatalf("nothing left: kept %v, said %q", keep, buf.String())
	}
}
