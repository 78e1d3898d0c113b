package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"

	"github.com/coordtorture/coordtorture/internal/tlsopt"
)

// tlsHelp is what run --help and preflight --help say about the --tls… flags.
const tlsHelp = `TLS (run and replay: with --provider external): --tls connects with TLS
and verifies the servers' certificates against the system's CAs; --tls-ca FILE
trusts the CA(s) in FILE instead, --tls-cert FILE and --tls-key FILE present a
client certificate (for tls-auth-clients), --tls-server-name NAME verifies the
certificates against NAME rather than the address's host, and --tls-insecure
skips verification (insecure: it says so on every run). Each implies --tls. A
plaintext client on a TLS-only port, or a TLS client on a plaintext port, is
told so at once.
`

// tlsConfig makes the TLS configuration of the --tls… flags (nil without
// them). A file that cannot be used is printed and false returned (exit 2);
// --tls-insecure is warned about loudly.
func tlsConfig(o tlsopt.Options, cmd string, stderr io.Writer) (*tls.Config, bool) {
	c, err := o.Config()
	if err != nil {
		fmt.Fprintf(stderr, "coordtorture %s: %v\n", cmd, err)
		return nil, false
	}
	if o.Insecure {
		fmt.Fprintf(stderr, "coordtorture %s: WARNING: --tls-insecure: the servers' certificates are NOT verified; anyone on the path can read and change the traffic\n", cmd)
	}
	return c, true
}

// probeTransport connects once to addr as the clients will: a transport
// mismatch (a plaintext client on a TLS-only port, the reverse, a refused
// certificate) is printed and false returned (exit 2); otherwise the
// connection's description ("" when the probe failed otherwise: the run
// reports that itself).
func probeTransport(addr string, c *tls.Config, cmd string, stderr io.Writer) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := tlsopt.Probe(ctx, addr, c, nil, 2*time.Second)
	if tlsopt.Mismatch(err) {
		fmt.Fprintf(stderr, "coordtorture %s: cannot connect to %v\n", cmd, err)
		return "", false
	}
	if err != nil {
		return "", true
	}
	return r.Describe(), true
}
