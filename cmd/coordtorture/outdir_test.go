package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOutKeepsOneRun: two runs into one --out (make torture into
// runs/latest) leave the second run's report alone: the first one's
// histories and visualizations are gone (fencecheck RUN/histories/* judged
// them as the second run's), and a file of the user's there stays.
func TestOutKeepsOneRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "latest")
	histories := func() []string {
		ents, _ := os.ReadDir(filepath.Join(dir, "histories"))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	var out, errb bytes.Buffer
	if code := run([]string{"run", "--server", build(), "--impl", "redislock", "--duration", "1s", "--seed", "11", "--out", dir, "fenced-lock/baseline"}, &out, &errb); code > 1 {
		t.Fatalf("first run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	first := "fenced-lock__baseline.redislock." + build() + ".jsonl.gz"
	if h := histories(); !slices.Contains(h, first) {
		t.Fatalf("first run's histories: %v, want %s", h, first)
	}
	// A visualization of the earlier run, and the user's notes beside it
	// and inside histories/.
	for _, f := range []string{"viz/old.html", "notes.txt", "histories/README"} {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"run", "--server", build(), "--duration", "1s", "--out", dir, "latch/baseline"}, &out, &errb); code != 0 {
		t.Fatalf("second run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	second := "latch__baseline.prim." + build() + ".jsonl.gz"
	if h := histories(); !slices.Equal(h, []string{"README", second}) {
		t.Errorf("after the second run histories/ holds %v, want the user's README and %s alone", h, second)
	}
	if _, err := os.Stat(filepath.Join(dir, "viz")); !os.IsNotExist(err) {
		t.Errorf("the earlier run's viz/ is still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Errorf("the user's file was removed: %v", err)
	}
	if !strings.Contains(out.String(), "held an earlier report") {
		t.Errorf("the removal is not said:\n%s", out.String())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "report.json")); bytes.Contains(b, []byte("fenced-lock/baseline")) {
		t.Errorf("report.json still names the first run's scenario")
	}
}
