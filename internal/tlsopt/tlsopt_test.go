package tlsopt_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/internal/tlsopt"
	"github.com/coordtorture/coordtorture/testbed"
)

// fast is how long a probe may take before a user would call it a hang.
const fast = 3 * time.Second

// The probe tells each mismatch apart on real servers, quickly: a plaintext
// client on a TLS-only port, a TLS client on a plaintext port, an untrusted
// certificate, a certificate for another name, a missing client certificate;
// and a matching client works.
func TestProbe(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := context.Background()
			tlsTopo := testbed.Standalone(t, b, testbed.WithTLS())
			plainTopo := testbed.Standalone(t, b)
			tlsAddr, plainAddr := tlsTopo.Node("n1").DirectAddr(), plainTopo.Node("n1").DirectAddr()
			files, _ := tlsTopo.TLSFiles()
			probe := func(addr string, o tlsopt.Options) (tlsopt.Result, error) {
				t.Helper()
				cfg, err := o.Config()
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				r, err := tlsopt.Probe(ctx, addr, cfg, nil, 2*time.Second)
				t.Logf("%s %+v: %v", addr, o, time.Since(start))
				if d := time.Since(start); d > fast {
					t.Errorf("the probe took %v", d)
				}
				return r, err
			}
			if _, err := probe(tlsAddr, tlsopt.Options{}); !errors.Is(err, tlsopt.ErrTLSOnly) || !strings.Contains(err.Error(), "--tls") {
				t.Errorf("plaintext on a TLS-only port: %v, want ErrTLSOnly", err)
			}
			if _, err := probe(plainAddr, tlsopt.Options{CA: files.CA}); !errors.Is(err, tlsopt.ErrNotTLS) {
				t.Errorf("TLS on a plaintext port: %v, want ErrNotTLS", err)
			}
			if r, err := probe(plainAddr, tlsopt.Options{}); err != nil || r.State != nil || r.Describe() != "plaintext connection" {
				t.Errorf("plaintext on a plaintext port: %+v %v", r, err)
			}
			r, err := probe(tlsAddr, tlsopt.Options{CA: files.CA})
			if err != nil || r.State == nil || !strings.Contains(r.Describe(), "server certificate verified") ||
				!strings.Contains(r.Describe(), "coordtorture testbed CA") {
				t.Errorf("TLS with the CA: %q %v", r.Describe(), err)
			}
			if _, err := probe(tlsAddr, tlsopt.Options{TLS: true}); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
				t.Errorf("TLS without the CA: %v, want a hint at --tls-ca", err)
			}
			if _, err := probe(tlsAddr, tlsopt.Options{CA: files.CA, ServerName: "elsewhere.example"}); err == nil || !strings.Contains(err.Error(), "--tls-server-name") {
				t.Errorf("TLS with another server name: %v, want a hint at --tls-server-name", err)
			}
			if r, err := probe(tlsAddr, tlsopt.Options{Insecure: true}); err != nil || !strings.Contains(r.Describe(), "NOT verified") {
				t.Errorf("TLS insecure: %q %v", r.Describe(), err)
			}
			if r, err := probe(tlsAddr, tlsopt.Options{CA: files.CA, Cert: files.ClientCert, Key: files.ClientKey}); err != nil || r.State == nil {
				t.Errorf("TLS with a client certificate: %v", err)
			}
			// A server that requires a client certificate.
			strict := testbed.Standalone(t, b, testbed.WithTLS(), testbed.WithConfig("tls-auth-clients yes"))
			sf, _ := strict.TLSFiles()
			strictAddr := strict.Node("n1").DirectAddr()
			if _, err := probe(strictAddr, tlsopt.Options{CA: sf.CA}); !errors.Is(err, tlsopt.ErrUntrusted) || !strings.Contains(err.Error(), "--tls-cert") {
				t.Errorf("no client certificate where one is required: %v, want ErrUntrusted and a hint at --tls-cert", err)
			}
			if _, err := probe(strictAddr, tlsopt.Options{CA: sf.CA, Cert: sf.ClientCert, Key: sf.ClientKey}); err != nil {
				t.Errorf("a client certificate where one is required: %v", err)
			}
		})
	}
}

// Config: no option is no TLS; every option implies it; a file that cannot
// be used is ErrBadFiles.
func TestConfig(t *testing.T) {
	if c, err := (tlsopt.Options{}).Config(); c != nil || err != nil {
		t.Fatalf("no options: %v %v", c, err)
	}
	for _, o := range []tlsopt.Options{{TLS: true}, {ServerName: "x"}, {Insecure: true}} {
		if c, err := o.Config(); c == nil || err != nil {
			t.Errorf("%+v: %v %v", o, c, err)
		}
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []tlsopt.Options{
		{CA: filepath.Join(dir, "missing.pem")},
		{CA: junk},
		{Cert: junk, Key: junk},
		{Cert: junk},
		{Key: junk},
	} {
		if _, err := o.Config(); !errors.Is(err, tlsopt.ErrBadFiles) {
			t.Errorf("%+v: %v, want ErrBadFiles", o, err)
		}
	}
}

// TestPingRefused: only the server refusing PING itself is an answer; a
// refusal of another command (a cluster client's CLUSTER SLOTS) is not.
func TestPingRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("NOPERM User svc has no permissions to run the 'ping' command"), true},
		{errors.New("NOPERM User svc has no permissions to run the 'cluster|slots' command"), false},
		{errors.New("NOAUTH Authentication required."), false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
	} {
		if got := tlsopt.PingRefused(c.err); got != c.want {
			t.Errorf("PingRefused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
