package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/reports"
)

// TestParallelSameVerdicts: a seeded small suite (prim beside the peers,
// with PATTERN@IMPL narrowing two scenarios) reaches the same verdicts, run
// by run and in the same order, with --parallel 1 and --parallel 2: runs at
// the same time have their own servers, addresses and proxies. The
// restricted scenarios run only the implementations named.
func TestParallelSameVerdicts(t *testing.T) {
	suite := []string{"fenced-lock/baseline", "fenced-lock/pause-client@prim+redislock", "fenced-lock/partition-client@prim",
		"ratelimit/fixed/baseline", "latch/baseline"}
	verdicts := func(parallel int) []string {
		dir := filepath.Join(t.TempDir(), fmt.Sprint("p", parallel))
		args := append([]string{"run", "--server", build(), "--impl", "all", "--duration", "3s", "--seed", "11",
			"--parallel", fmt.Sprint(parallel), "--out", dir}, suite...)
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		t.Logf("--parallel %d: exit %d\n%s", parallel, code, out.String())
		if code != 0 {
			t.Fatalf("--parallel %d: exit %d (prim's verdicts set it: every one must hold)\n%s", parallel, code, errb.String())
		}
		if parallel > 1 && !strings.Contains(out.String(), fmt.Sprintf("%d runs at a time", parallel)) {
			t.Errorf("--parallel %d: the banner does not say how many runs at a time", parallel)
		}
		b, err := os.ReadFile(filepath.Join(dir, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rep reports.Run
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		var vs []string
		for _, o := range rep.Outcomes {
			vs = append(vs, fmt.Sprintf("%s[%s]=%s", o.Scenario, o.Impl, o.Verdict))
		}
		return vs
	}
	one, two := verdicts(1), verdicts(2)
	want := []string{"fenced-lock/baseline[prim]=PASS", "fenced-lock/baseline[redislock]=PASS", "fenced-lock/baseline[redsync]=PASS",
		"fenced-lock/partition-client[prim]=PASS", "fenced-lock/pause-client[prim]=PASS", "fenced-lock/pause-client[redislock]=FAIL",
		"latch/baseline[prim]=PASS", "ratelimit/fixed/baseline[prim]=PASS", "ratelimit/fixed/baseline[ulule]=PASS"}
	if strings.Join(one, " ") != strings.Join(two, " ") {
		t.Fatalf("verdicts differ:\n--parallel 1: %v\n--parallel 2: %v", one, two)
	}
	if strings.Join(one, " ") != strings.Join(want, " ") {
		t.Errorf("verdicts %v, want %v", one, want)
	}
}
