package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/scenarios"
)

// makeVar is the value of a Makefile's "NAME ?= …" (continued lines too).
func makeVar(t *testing.T, makefile, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` \?= ((?:.*\\\n)*.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile: no %s", name)
	}
	return strings.Fields(strings.ReplaceAll(m[1], "\\\n", " "))
}

// runsOf is how many scenario runs coordtorture run --impl all makes of the
// patterns (as runCmd builds its jobs on one build).
func runsOf(t *testing.T, positional []string) (int, []*scenarios.Scenario) {
	t.Helper()
	patterns, only, err := implRestrictions(positional)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := selectScenarios(patterns)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range ss {
		for _, impl := range scenarios.EveryImpl() {
			if o := only[s.Name]; (o == nil || o[impl]) && s.Supports(impl) {
				n++
			}
		}
	}
	return n, ss
}

// TestDefaultSuiteAsDocumented (review finding 4): the README and the
// Makefile say the default suite has every kind of fault, a forced failover
// among them, and how many runs the suites make: both are so.
func TestDefaultSuiteAsDocumented(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	suite := makeVar(t, string(mk), "TORTURE_SUITE")
	n, ss := runsOf(t, suite)
	forced := false
	for _, s := range ss {
		forced = forced || strings.HasSuffix(s.Name, "/failover-forced")
	}
	if !forced || !strings.Contains(string(mk), "a forced failover") {
		t.Errorf("the Makefile says the default suite has a forced failover; it has a */failover-forced scenario: %v", forced)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	if want := strconv.Itoa(n) + " runs of 5 s"; !strings.Contains(text, want) {
		t.Errorf("the default suite makes %d runs: the README does not say %q", n, want)
	}
	full, _ := runsOf(t, makeVar(t, string(mk), "TORTURE_FULL_SUITE"))
	if want := "(" + strconv.Itoa(full) + " runs,"; !strings.Contains(text, want) {
		t.Errorf("the full suite makes %d runs: the README does not say %q", full, want)
	}
}

// TestExternalRunsOneAtATime: with --provider external the runs go to one
// deployment, so --parallel's default there is one, whatever the cores;
// --parallel N given is kept.
func TestExternalRunsOneAtATime(t *testing.T) {
	defer func(f func() int) { numCPU = f }(numCPU)
	numCPU = func() int { return 8 } // a default of 4 elsewhere
	dir := t.TempDir()
	for _, tc := range []struct {
		flags []string
		want  string
	}{{nil, ""}, {[]string{"--parallel", "2"}, "2 runs at a time"}} {
		var out, errb bytes.Buffer
		args := append([]string{"run", "--provider", "external", "--addr", "127.0.0.1:1", "--duration", "1s", "--out", filepath.Join(dir, "x"),
			"fenced-lock/baseline", "latch/baseline"}, tc.flags...)
		run(args, &out, &errb)
		if got := strings.Contains(out.String(), "runs at a time"); got != (tc.want != "") || !strings.Contains(out.String(), tc.want) {
			t.Errorf("external %v: said %q; want %q", tc.flags, out.String(), tc.want)
		}
	}
}
