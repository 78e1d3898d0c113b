package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExitStatusOfTheREADMECommands builds the binaries as the README says
// (make build) and checks that its commands give the documented exit
// status: 0 for help, 1 when a must-hold property FAILs (a mutant the
// checkers catch), 2 for a pattern that matches no scenario; and that make
// torture, which GNU make can only end with its own 2, says which status
// coordtorture gave (go run turned every failure into 1, make into 2,
// without a word).
func TestExitStatusOfTheREADMECommands(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if out, err := exec.Command("make", "-C", root, "-s", "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	status := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want int
		out  string
	}{
		{[]string{"run", "--help"}, 0, "Usage: coordtorture run"},
		{[]string{"run", "fenced-lock/nope", "--out", filepath.Join(dir, "nope")}, 2, `no scenario matches "fenced-lock/nope"`},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"run", "--server", build(), "--impl", "mutant-resource-ignores-tokens", "--ttl", "200ms", "--duration", "4s", "--seed", "5",
			"--out", filepath.Join(dir, "mutant"), "fenced-lock/pause-client"}, 1, "overall: FAIL (exit status 1)"},
	} {
		out, err := exec.Command(filepath.Join(bin, "coordtorture"), tc.args...).CombinedOutput()
		if got := status(err); got != tc.want || !strings.Contains(string(out), tc.out) {
			t.Errorf("bin/coordtorture %v: exit %d, want %d with %q:\n%s", tc.args, got, tc.want, tc.out, out)
		}
	}
	if out, err := exec.Command(filepath.Join(bin, "fencecheck"), filepath.Join(dir, "mutant", "histories", "fenced-lock__pause-client.mutant-resource-ignores-tokens."+build()+".jsonl.gz")).CombinedOutput(); status(err) != 1 {
		t.Errorf("bin/fencecheck on the mutant's history: exit %d, want 1:\n%s", status(err), out)
	}

	// make torture: make's own 2, with coordtorture's status said (-o: the
	// servers are there and the binary was just built).
	for _, tc := range []struct {
		vars []string
		want string
	}{
		{[]string{"SCENARIOS=fenced-lock/nope"}, "coordtorture exited 2 (UNKNOWN, a usage error, or the run could not start)"},
		{[]string{"SCENARIOS=fenced-lock/pause-client", "TORTURE_IMPL=mutant-resource-ignores-tokens", "TORTURE_DURATION=4s",
			"TORTURE_FLAGS=--ttl 200ms --seed 5 --server " + build()}, "coordtorture exited 1 (FAIL: a must-hold property broke)"},
	} {
		args := append([]string{"-C", root, "-s", "-o", "servers", "-o", "build", "torture", "BIN=" + bin, "TORTURE_OUT=" + filepath.Join(dir, "make")}, tc.vars...)
		if d := os.Getenv("COORDTORTURE_SERVERS_DIR"); d != "" {
			args = append(args, "SERVERS_DIR="+d) // the Makefile exports its own
		}
		cmd := exec.Command("make", args...)
		cmd.Env = append(os.Environ(), "MAKEFLAGS=")
		out, err := cmd.CombinedOutput()
		if got := status(err); got != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("make torture %v: exit %d, want make's 2 with %q:\n%s", tc.vars, got, tc.want, out)
		}
	}
}
