package preflight

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/internal/tlsopt"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestTLS: on a TLS-only server, the tls check is OK with the CA (naming the
// TLS version and the CA), WARN with verification skipped, and in the JSON;
// a plaintext client is told the port looks TLS-only, and a TLS client on a
// plaintext server that it does not speak TLS, both within a few seconds (not
// after the client's retries); on a plaintext server the check is a WARN.
func TestTLS(t *testing.T) {
	b := build()
	topo := testbed.Standalone(t, b, testbed.WithTLS())
	files, _ := topo.TLSFiles()
	addr := []string{topo.Node("n1").DirectAddr()}
	cfg, err := tlsopt.Options{CA: files.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	r := runOK(t, Options{Addrs: addr, TLS: true, TLSConfig: cfg})
	if c := find(t, r, "tls"); c.Status != OK || !strings.Contains(c.Reason, "TLS 1.3, server certificate verified") ||
		!strings.Contains(c.Reason, "coordtorture testbed CA") {
		t.Errorf("tls with the CA: %+v", c)
	}
	if r.Checks[1].Name != "tls" {
		t.Errorf("the tls check is not second: %s", text(r))
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"check": "tls"`) {
		t.Errorf("the JSON has no tls check: %v\n%s", err, js.String())
	}
	insecure, _ := tlsopt.Options{Insecure: true}.Config()
	if c := find(t, runOK(t, Options{Addrs: addr, TLSConfig: insecure}), "tls"); c.Status != Warn || !strings.Contains(c.Reason, "NOT verified") ||
		!strings.Contains(c.Fix, "--tls-ca") {
		t.Errorf("tls insecure: %+v", c)
	}

	plain := testbed.Standalone(t, b)
	for _, tc := range []struct {
		name string
		o    Options
		want error
	}{
		{"plaintext client, TLS-only server", Options{Addrs: addr}, tlsopt.ErrTLSOnly},
		{"TLS client, plaintext server", Options{Addrs: []string{plain.Node("n1").DirectAddr()}, TLSConfig: cfg}, tlsopt.ErrNotTLS},
	} {
		start := time.Now()
		_, err := Run(context.Background(), tc.o)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s: %v to fail", tc.name, d)
		}
		if !errors.Is(err, ErrConnect) || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want ErrConnect and %v", tc.name, err, tc.want)
		}
	}
	if c := find(t, runOK(t, Options{Addrs: []string{plain.Node("n1").DirectAddr()}}), "tls"); c.Status != Warn || !strings.Contains(c.Reason, "plaintext connection") {
		t.Errorf("tls on a plaintext server: %+v", c)
	}
}

// TestTLSSentinelCluster: preflight works over TLS through sentinels (its
// Sentinel clients too) and on a cluster (every primary), through the
// proxies with the test's own dialer, the handshake on top of it.
func TestTLSSentinelCluster(t *testing.T) {
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		topo := testbed.Replicated(t, build(), 1, 3, testbed.WithTLS())
		var addrs []string
		for _, s := range topo.Sentinels() {
			addrs = append(addrs, s.Addr)
		}
		r := runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, TLSConfig: topo.TLSConfig(), Dialer: topo.PeerDialer("")})
		if c := find(t, r, "tls"); c.Status != OK {
			t.Errorf("tls: %+v", c)
		}
		if c := find(t, r, "sentinel"); c.Status != OK {
			t.Errorf("sentinel over TLS: %+v\n%s", c, text(r))
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		topo := testbed.Cluster(t, build(), 3, 0, testbed.WithTLS())
		var addrs []string
		for _, n := range topo.Nodes() {
			addrs = append(addrs, n.Addr)
		}
		r := runOK(t, Options{Addrs: addrs, TLSConfig: topo.TLSConfig(), Dialer: topo.PeerDialer("")})
		if c := find(t, r, "tls"); c.Status != OK {
			t.Errorf("tls: %+v", c)
		}
		if c := find(t, r, "cluster"); c.Status != OK {
			t.Errorf("cluster over TLS: %+v\n%s", c, text(r))
		}
	})
}
