package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/internal/preflight"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestTLSCLI: against a TLS-only server, run --provider external --tls-ca
// runs a scenario and says how it connected (stdout and report.json), and
// preflight --tls-ca reports the tls check, in text and JSON; without the
// TLS flags both exit 2 at once saying the port looks TLS-only and to use
// --tls, and with --tls against a plaintext server that it does not speak
// TLS; --tls-insecure is warned about; bad files exit 2.
func TestTLSCLI(t *testing.T) {
	topo := testbed.Standalone(t, build(), testbed.WithTLS(), testbed.WithAOF(true))
	files, _ := topo.TLSFiles()
	addr := topo.Node("n1").DirectAddr()
	dir := t.TempDir()
	var out, errb bytes.Buffer

	args := []string{"run", "--provider", "external", "--addr", addr, "--tls-ca", files.CA, "--duration", "2s", "--seed", "5",
		"--out", filepath.Join(dir, "ext"), "fenced-lock/baseline"}
	if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "fenced-lock/baseline [prim, external] PASS") ||
		!strings.Contains(out.String(), "TLS 1.3, server certificate verified") {
		t.Fatalf("run over TLS: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ext", "report.json")); err != nil || !strings.Contains(string(b), `"transport": "TLS 1.3, server certificate verified`) {
		t.Errorf("report.json does not say how it connected: %v", err)
	}

	out.Reset()
	errb.Reset()
	code := run([]string{"preflight", "--addr", addr, "--tls-ca", files.CA, "--primitives", "fenced-lock"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "OK    tls ") || !strings.Contains(out.String(), "server certificate verified") {
		t.Errorf("preflight over TLS: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	run([]string{"preflight", "--json", "--addr", addr, "--tls-ca", files.CA, "--primitives", "fenced-lock"}, &out, &errb)
	var rep preflight.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Checks) < 2 || rep.Checks[1].Name != "tls" || rep.Checks[1].Status != preflight.OK {
		t.Errorf("preflight --json over TLS: %v\n%s", err, out.String())
	}
	out.Reset()
	errb.Reset()
	code = run([]string{"preflight", "--addr", addr, "--tls-insecure", "--primitives", "fenced-lock"}, &out, &errb)
	if code != 0 || !strings.Contains(errb.String(), "WARNING: --tls-insecure") || !strings.Contains(out.String(), "WARN  tls ") {
		t.Errorf("preflight --tls-insecure: exit %d\n%s%s", code, out.String(), errb.String())
	}

	plain := testbed.Standalone(t, build())
	plainAddr := plain.Node("n1").DirectAddr()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--provider", "external", "--addr", addr, "--duration", "1s", "--out", filepath.Join(dir, "x"), "fenced-lock/baseline"}, "looks TLS-only; connect with --tls"},
		{[]string{"preflight", "--addr", addr}, "looks TLS-only; connect with --tls"},
		{[]string{"run", "--provider", "external", "--addr", plainAddr, "--tls", "--duration", "1s", "--out", filepath.Join(dir, "y"), "fenced-lock/baseline"}, "does not speak TLS"},
		{[]string{"preflight", "--addr", plainAddr, "--tls"}, "does not speak TLS"},
		{[]string{"preflight", "--addr", addr, "--tls"}, "--tls-ca"},
		{[]string{"preflight", "--addr", addr, "--tls-ca", filepath.Join(dir, "missing.pem")}, "bad TLS option"},
		{[]string{"run", "--provider", "external", "--addr", addr, "--tls-key", files.ClientKey, "fenced-lock/baseline"}, "--tls-key needs --tls-cert"},
	} {
		out.Reset()
		errb.Reset()
		start := time.Now()
		code := run(tc.args, &out, &errb)
		t.Logf("%v: %v: %s", tc.args[:2], time.Since(start).Round(time.Millisecond), strings.TrimSpace(errb.String()))
		// A user would call more than a few seconds a hang (go-redis's
		// retries take longer).
		if d := time.Since(start); code != 2 || !strings.Contains(errb.String(), tc.want) || d > 5*time.Second {
			t.Errorf("%q: exit %d after %v, want 2 at once saying %q\nstdout %s\nstderr %s", tc.args, code, d, tc.want, out.String(), errb.String())
		}
	}
}
