package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// TestExternalProvider runs the fault-free scenarios against a server the
// harness did not start (it reaches it by its real address, as a user's
// deployment), and checks the run leaves no key behind.
func TestExternalProvider(t *testing.T) {
	topo := testbed.Standalone(t, build())
	addr := topo.Node("n1").DirectAddr()
	ctx := context.Background()
	admin := topo.Node("n1").Admin()
	if err := admin.Set(ctx, "users-own-key", "keep", 0).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"run", "--provider", "external", "--addr", addr, "--duration", "2s", "--seed", "5",
		"--out", filepath.Join(dir, "ext"), "fenced-lock", "waiting-lock/handoff"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	// Scenarios that inject faults are skipped with one note, the others ran.
	if n := strings.Count(errb.String(), "skipping"); n != 1 || !strings.Contains(errb.String(), "scenarios (faults or own topology: local only)") {
		t.Errorf("want one skip note for the fault scenarios, got %d:\n%s", n, errb.String())
	}
	for _, want := range []string{"fenced-lock/baseline", "fenced-lock/pause-client", "waiting-lock/handoff"} {
		if !strings.Contains(out.String(), want+" [prim, external] PASS") {
			t.Errorf("%s did not PASS on the external deployment:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "ext", "report.json"))
	if err != nil || !strings.Contains(string(b), `"provider": "external"`) {
		t.Fatalf("report.json does not name the provider: %v", err)
	}
	// Only the user's own key is left.
	keys, err := admin.Keys(ctx, "*").Result()
	if err != nil || len(keys) != 1 || keys[0] != "users-own-key" {
		t.Fatalf("keys left on the deployment: %v %v", keys, err)
	}

	// Naming one fault scenario on its own is an error, and so is a
	// deployment that cannot be reached.
	for _, bad := range [][]string{
		{"run", "--provider", "external", "--addr", addr, "fenced-lock/partition-client"},
		{"run", "--provider", "external", "fenced-lock/baseline"},
		{"run", "--addr", addr, "fenced-lock/baseline"},
		{"matrix", "--provider", "external", "--addr", addr},
		{"run", "--provider", "external", "--addr", addr, "--sentinel-user", "s", "fenced-lock/baseline"}, // needs --master-name
		{"run", "--sentinel-user", "s", "fenced-lock/baseline"},                                           // needs --provider external
	} {
		errb.Reset()
		if code := run(bad, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", bad, code, errb.String())
		}
	}
	errb.Reset()
	out.Reset()
	start := time.Now()
	code := run([]string{"run", "--provider", "external", "--addr", "127.0.0.1:1", "--duration", "1s", "--out", filepath.Join(dir, "unreachable"), "fenced-lock/baseline"}, &out, &errb)
	// The error is part of the run's report: in the summary, once.
	if code != 2 || strings.Count(out.String()+errb.String(), "cannot reach") != 1 || time.Since(start) > 20*time.Second {
		t.Errorf("unreachable deployment: exit %d after %v, stdout %q, stderr %q", code, time.Since(start), out.String(), errb.String())
	}
}

// TestExternalDefaultSelectionPasses: `run --provider external` of the
// default selection (every scenario; those that need faults or a topology of
// their own are skipped) against a healthy deployment exits 0, and no
// scenario is UNKNOWN for what an external deployment cannot give
// (semaphore/no-expiry-crash was: it could not read the crashed holder's
// permit on a server the harness did not start, though the run's own client
// can). On a build without hash-field expiry the hash-lease scenarios are
// N/A naming it, never UNKNOWN.
func TestExternalDefaultSelectionPasses(t *testing.T) {
	topo := testbed.Standalone(t, build())
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"run", "--provider", "external", "--addr", topo.Node("n1").DirectAddr(), "--duration", "3s", "--seed", "11",
		"--out", filepath.Join(dir, "ext")}
	code := run(args, &out, &errb)
	if code != 0 || strings.Contains(out.String(), "UNKNOWN") || strings.Contains(out.String(), "FAIL") {
		t.Fatalf("external run of the default selection: exit %d, want 0 without UNKNOWN\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"semaphore/no-expiry-crash [prim, external] PASS", "fenced-lock/baseline [prim, external] PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q:\n%s", want, out.String())
		}
	}
}
