package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInterruptWritesReport: Ctrl-C (SIGINT) during a run stops it, closes
// its servers, writes the report of what ran with the overall verdict
// UNKNOWN, and exits 2, as the report says; junit.xml has a failure. (The
// testbed's own signal handler killed every server and exited 130 first,
// with no report, while the CLI's, which writes one, never got to run.)
func TestInterruptWritesReport(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "coordtorture")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "cut")
	cmd := exec.Command(bin, "run", "--server", build(), "--duration", "60s", "--seed", "1", "--out", dir, "fenced-lock/baseline")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() { // the scenario is running once its progress shows
		fmt.Fprintln(&out, sc.Text())
		if strings.Contains(sc.Text(), " 1s/1m0s") || strings.Contains(sc.Text(), " 2s/1m0s") {
			break
		}
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		fmt.Fprintln(&out, sc.Text())
	}
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 2 || !strings.Contains(out.String(), "overall: UNKNOWN (interrupted") {
		t.Fatalf("interrupted run: exit %d after %v, want 2 with the overall verdict UNKNOWN\nstdout:\n%s\nstderr:\n%s", code, time.Since(start), out.String(), stderr.String())
	}
	var rep struct {
		Overall     string
		Interrupted bool
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil || rep.Overall != "UNKNOWN" || !rep.Interrupted {
		t.Errorf("report.json: %+v %v", rep, err)
	}
	if junit, _ := os.ReadFile(filepath.Join(dir, "junit.xml")); !strings.Contains(string(junit), `<failure message="interrupted: `) {
		t.Errorf("junit.xml has no failure for the interrupt:\n%s", junit)
	}
	// Its servers were closed: no temp dir of that process is left.
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("coordtorture-%d-*", cmd.Process.Pid)))
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
