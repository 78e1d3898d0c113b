package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/internal/preflight"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestPreflightCLI: the exit status (0 without FAIL, 1 with one, 2 on usage
// and connection errors), --help, and --json that parses into the report.
func TestPreflightCLI(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"preflight", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "Exit status: 0 when no check is FAIL") ||
		!strings.Contains(out.String(), "-master-name") {
		t.Fatalf("--help: %d\n%s", code, out.String())
	}
	for _, bad := range [][]string{{"preflight"}, {"preflight", "--addr", "127.0.0.1:1", "extra"},
		{"preflight", "--addr", "127.0.0.1:1", "--primitives", "mutex"}, {"preflight", "--bogus"},
		{"preflight", "--addr", "127.0.0.1:1", "--timeout", "300ms"},
		{"preflight", "--addr", "127.0.0.1:1", "--sentinel-user", "s"},                         // the sentinel user needs --master-name
		{"preflight", "--addr", "127.0.0.1:1", "--master-name", "m", "--sentinel-user", "s"}} { // and its password
		out.Reset()
		errb.Reset()
		if code := run(bad, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", bad, code, errb.String())
		}
	}

	topo := testbed.Standalone(t, build(), testbed.WithAOF(true), testbed.WithConfig("maxmemory 256mb", "maxmemory-policy allkeys-lru"))
	addr := topo.Node("n1").DirectAddr()
	out.Reset()
	if code := run([]string{"preflight", "--addr", addr}, &out, &errb); code != 1 ||
		!strings.Contains(out.String(), "FAIL  maxmemory-policy") || !strings.Contains(out.String(), "see coordtorture run fenced-lock/eviction") {
		t.Errorf("evicting policy: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	code := run([]string{"preflight", "--json", "--addr", addr}, &out, &errb)
	var rep preflight.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 1 || !rep.Failed() || len(rep.Guarantees) == 0 {
		t.Errorf("--json: exit %d, %v\n%s", code, err, out.String())
	}
	// Without fenced locks the evicting policy is a WARN: exit 0.
	out.Reset()
	if code := run([]string{"preflight", "--addr", addr, "--primitives", "rate-limiters,semaphore"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "WARN  maxmemory-policy") {
		t.Errorf("--primitives: exit %d\n%s", code, out.String())
	}
}

// TestPreflightFailsWhatCannotWork: through the CLI, a user who may not run
// EVAL/EVALSHA is exit 1 with its primitives FAIL (it was 0: WARN "could
// not be probed"); two standalone servers given without --cluster exit 2
// saying a Cluster was assumed (it said only "cluster support disabled").
func TestPreflightFailsWhatCannotWork(t *testing.T) {
	topo := testbed.Standalone(t, build())
	addr := topo.Node("n1").DirectAddr()
	if err := topo.Node("n1").Admin().Do(context.Background(), "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all",
		"-eval", "-evalsha", "-acl", "-multi").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COORDTORTURE_PASSWORD", "pw")
	var out, errb bytes.Buffer
	if code := run([]string{"preflight", "--addr", addr, "--user", "noeval", "--primitives", "semaphore"}, &out, &errb); code != 1 ||
		!strings.Contains(out.String(), "FAIL  primitive/semaphore") || !strings.Contains(out.String(), "+eval +evalsha") {
		t.Errorf("a user without EVAL: exit %d\n%s%s", code, out.String(), errb.String())
	}
	other := testbed.Standalone(t, build())
	out.Reset()
	errb.Reset()
	if code := run([]string{"preflight", "--addr", addr + "," + other.Node("n1").DirectAddr()}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "several addresses without --cluster") {
		t.Errorf("two standalone servers: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
