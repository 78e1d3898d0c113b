package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		{"run", "--duration", "-1s"}, {"run", "--provider", "docker"}, {"run", "--impl", "nope", "--duration", "1s", "fenced-lock/baseline"}} {
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
	for _, f := range []string{"summary.txt", "report.json", "junit.xml", "histories/fenced-lock__baseline.prim." + build() + ".jsonl"} {
		if st, err := os.Stat(filepath.Join(dir, "ok", f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	junit, _ := os.ReadFile(filepath.Join(dir, "ok", "junit.xml"))
	if strings.Count(string(junit), "<testcase") != 3 {
		t.Fatalf("junit has %d test cases, want one per property:\n%s", strings.Count(string(junit), "<testcase"), junit)
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
	out.Reset()
	if code := run([]string{"replay", "--out", filepath.Join(dir, "replay"), filepath.Join(dir, "bad")}, &out, &errb); code != 1 || !strings.Contains(out.String(), "seed 3") {
		t.Fatalf("replay: exit %d\n%s", code, out.String())
	}
}
