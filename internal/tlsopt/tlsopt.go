// Package tlsopt is how coordtorture's commands connect to a deployment with
// TLS: the --tls… flags (one set, shared by run and preflight), the
// *tls.Config they make, and a probe that tells, in one round trip, a
// plaintext client on a TLS-only port or a TLS client on a plaintext port
// apart from other failures, with a message saying which flag to use.
package tlsopt

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Options are the TLS flags. Any of CA, Cert, Key, ServerName and Insecure
// implies TLS.
type Options struct {
	TLS        bool
	CA         string // PEM file of the CA(s) that sign the servers' certificates (default: the system's)
	Cert, Key  string // PEM files of a client certificate and its key, for servers that ask for one
	ServerName string // the name the servers' certificates must carry (default: the address's host)
	Insecure   bool   // skip verifying the servers' certificates
}

// Register registers the flags on fs.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.BoolVar(&o.TLS, "tls", false, "connect with TLS (the servers' certificates are verified against the system's CAs, or --tls-ca)")
	fs.StringVar(&o.CA, "tls-ca", "", "PEM `file` of the CA(s) that sign the servers' certificates (implies --tls)")
	fs.StringVar(&o.Cert, "tls-cert", "", "PEM `file` of a client certificate, for servers that ask for one (with --tls-key; implies --tls)")
	fs.StringVar(&o.Key, "tls-key", "", "PEM `file` of the client certificate's private key (with --tls-cert; implies --tls)")
	fs.StringVar(&o.ServerName, "tls-server-name", "", "the `name` the servers' certificates must carry, when it is not the address's host (implies --tls)")
	fs.BoolVar(&o.Insecure, "tls-insecure", false, "INSECURE: do not verify the servers' certificates (anyone on the path can read and change the traffic); implies --tls")
}

// Enabled reports whether the options ask for TLS.
func (o Options) Enabled() bool {
	return o.TLS || o.CA != "" || o.Cert != "" || o.Key != "" || o.ServerName != "" || o.Insecure
}

// ErrBadFiles marks a CA, certificate or key file that cannot be read or
// used.
var ErrBadFiles = errors.New("bad TLS option")

// Config returns the configuration the options describe: nil when they do
// not ask for TLS. A file that cannot be read or parsed is ErrBadFiles.
func (o Options) Config() (*tls.Config, error) {
	if !o.Enabled() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName, InsecureSkipVerify: o.Insecure}
	if o.CA != "" {
		pem, err := os.ReadFile(o.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: --tls-ca: %v", ErrBadFiles, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --tls-ca %s: no PEM certificate in it", ErrBadFiles, o.CA)
		}
		c.RootCAs = pool
	}
	switch {
	case o.Cert != "" && o.Key != "":
		pair, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: --tls-cert %s --tls-key %s: %v", ErrBadFiles, o.Cert, o.Key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case o.Cert != "":
		return nil, fmt.Errorf("%w: --tls-cert needs --tls-key", ErrBadFiles)
	case o.Key != "":
		return nil, fmt.Errorf("%w: --tls-key needs --tls-cert", ErrBadFiles)
	}
	return c, nil
}

// ErrTLSOnly: the server closed a plaintext connection at once, as a TLS-only
// port does.
var ErrTLSOnly = errors.New("the server closed the connection on a plaintext PING: the port looks TLS-only; connect with --tls")

// ErrNotTLS: the server answers in plaintext where the client expects TLS.
var ErrNotTLS = errors.New("the server answers in plaintext, not TLS: the port does not speak TLS; drop --tls (or use the server's tls-port)")

// ErrUntrusted: the TLS handshake failed on the certificates: the server's
// is not trusted or names another host, or the server wants one from the
// client.
var ErrUntrusted = errors.New("TLS certificate refused")

// Mismatch reports whether err is one of the probe's transport findings
// (ErrTLSOnly, ErrNotTLS, ErrUntrusted): the deployment answers, but not
// to the way the client connects, so retrying cannot help.
func Mismatch(err error) bool {
	return errors.Is(err, ErrTLSOnly) || errors.Is(err, ErrNotTLS) || errors.Is(err, ErrUntrusted)
}

// Dialer opens a TCP connection (net.Dialer's DialContext fits).
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Result is what a probe found.
type Result struct {
	// State is the TLS connection's state; nil for a plaintext connection.
	State *tls.ConnectionState
	// Insecure: the server's certificate was not verified.
	Insecure bool
}

// Describe is a one-line description of the connection: "plaintext", or the
// TLS version and how the server's certificate was checked.
func (r Result) Describe() string {
	if r.State == nil {
		return "plaintext connection"
	}
	v := tls.VersionName(r.State.Version)
	if r.Insecure {
		return v + ", server certificate NOT verified (--tls-insecure)"
	}
	s := v + ", server certificate verified"
	if ch := r.State.VerifiedChains; len(ch) > 0 && len(ch[0]) > 0 {
		leaf, root := ch[0][0], ch[0][len(ch[0])-1]
		s += fmt.Sprintf(" (%s, issued by CA %q)", names(leaf), root.Subject.CommonName)
	}
	return s
}

func names(c *x509.Certificate) string {
	var ns []string
	ns = append(ns, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		ns = append(ns, ip.String())
	}
	if len(ns) == 0 {
		return "CN " + c.Subject.CommonName
	}
	if len(ns) > 3 {
		ns = append(ns[:3], "…")
	}
	return "for " + strings.Join(ns, ", ")
}

// ProbeAny probes the addresses in turn (Probe) and returns the first that
// answers: a deployment with a node down (a sentinel, a cluster's seed) is
// still reached. A transport mismatch (Mismatch) is returned at once: the
// other addresses of one deployment speak the same. When none answers, the
// error names each address's failure.
func ProbeAny(ctx context.Context, addrs []string, cfg *tls.Config, dial Dialer, timeout time.Duration) (Result, error) {
	var errs []error
	for _, a := range addrs {
		r, err := Probe(ctx, a, cfg, dial, timeout)
		if err == nil || Mismatch(err) {
			return r, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return Result{}, errors.New("no address to probe")
	}
	return Result{}, errors.Join(errs...)
}

// Probe connects to addr once, as the options' clients will (cfg nil:
// plaintext), sends PING and reads the answer, within timeout. It tells the
// transport mismatches apart: ErrTLSOnly for a plaintext client on a TLS-only
// port (checked with a TLS handshake that does not verify), ErrNotTLS for a
// TLS client on a plaintext port, and a certificate the client does not
// trust with what to pass. Any answer to PING, an error reply such as
// NOAUTH included, means the transport works. dial nil dials directly.
func Probe(ctx context.Context, addr string, cfg *tls.Config, dial Dialer, timeout time.Duration) (Result, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	if cfg == nil {
		closed, err := plainPing(ctx, addr, dial)
		if err == nil {
			return Result{}, nil
		}
		if closed && speaksTLS(ctx, addr, dial) {
			return Result{}, fmt.Errorf("%s: %w", addr, ErrTLSOnly)
		}
		return Result{}, fmt.Errorf("%s: %w", addr, err)
	}
	type handshake struct {
		st  *tls.ConnectionState
		err error
	}
	hs := make(chan handshake, 1)
	go func() {
		st, err := tlsPing(ctx, addr, cfg, dial)
		hs <- handshake{st, err}
	}()
	var h handshake
	select {
	case h = <-hs:
	case <-time.After(quietHandshake):
		// No answer yet: a plaintext server waits for the end of a line that
		// never comes, so the handshake would hang until timeout. Ask it in
		// plaintext meanwhile.
		pctx, pcancel := context.WithTimeout(parent, timeout)
		closed, perr := plainPing(pctx, addr, dial)
		pcancel()
		if perr == nil && !closed {
			return Result{}, fmt.Errorf("%s: %w", addr, ErrNotTLS)
		}
		h = <-hs
	}
	if h.err == nil {
		return Result{State: h.st, Insecure: cfg.InsecureSkipVerify}, nil
	}
	err := h.err
	var rh tls.RecordHeaderError
	var verr *tls.CertificateVerificationError
	var hn x509.HostnameError
	switch {
	case errors.As(err, &rh):
		return Result{}, fmt.Errorf("%s: %w", addr, ErrNotTLS)
	case errors.As(err, &hn):
		return Result{}, fmt.Errorf("%s: %w: %v: the server's certificate does not name this address; pass the name it carries with --tls-server-name", addr, ErrUntrusted, err)
	case errors.As(err, &verr):
		return Result{}, fmt.Errorf("%s: %w: %v: the server's certificate is not signed by a CA this client trusts; pass its CA with --tls-ca FILE (--tls-insecure skips the check, insecurely)", addr, ErrUntrusted, err)
	case strings.Contains(err.Error(), "certificate required"):
		return Result{}, fmt.Errorf("%s: %w: %v: the server asks for a client certificate; pass --tls-cert FILE and --tls-key FILE", addr, ErrUntrusted, err)
	}
	return Result{}, fmt.Errorf("%s: %w", addr, err)
}

// quietHandshake is how long a TLS handshake may go unanswered before the
// probe asks the server in plaintext too (a TLS server answers within a
// round trip).
const quietHandshake = 300 * time.Millisecond

// plainPing sends an inline PING; closed reports a connection closed or
// reset by the server instead of an answer.
func plainPing(ctx context.Context, addr string, dial Dialer) (closed bool, err error) {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return isClosed(err), err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return isClosed(err), fmt.Errorf("no answer to a plaintext PING: %w", err)
	}
	if line == "" || (line[0] != '+' && line[0] != '-') {
		// A TLS alert record (0x15) or anything else that is no RESP reply.
		return true, fmt.Errorf("not a Redis reply to a plaintext PING: %q", strings.TrimSpace(line))
	}
	return false, nil
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// speaksTLS reports whether addr completes a TLS handshake (unverified: only
// whether it is TLS matters here).
func speaksTLS(ctx context.Context, addr string, dial Dialer) bool {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only tells TLS from plaintext
	defer tc.Close()
	return tc.HandshakeContext(ctx) == nil
}

// tlsPing handshakes with cfg and sends PING (a server that requires a client
// certificate says so only then, in TLS 1.3).
func tlsPing(ctx context.Context, addr string, cfg *tls.Config, dial Dialer) (*tls.ConnectionState, error) {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			c.Close()
			return nil, err
		}
		cfg.ServerName = host
	}
	// Whether the server asked for a client certificate and got none: a
	// server that requires one refuses the connection after the handshake
	// (TLS 1.3), with an alert or a reset, whichever the client sees first.
	var askedNone atomic.Bool
	if len(cfg.Certificates) == 0 && cfg.GetClientCertificate == nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			askedNone.Store(true)
			return &tls.Certificate{}, nil
		}
	}
	refused := func(err error) error {
		if askedNone.Load() && (isClosed(err) || strings.Contains(err.Error(), "remote error")) && !strings.Contains(err.Error(), "certificate required") {
			return fmt.Errorf("the server asked for a client certificate and dropped the connection without one (certificate required): %w", err)
		}
		return err
	}
	tc := tls.Client(c, cfg)
	defer tc.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(d)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, refused(err)
	}
	if _, err := tc.Write([]byte("PING\r\n")); err != nil {
		return nil, refused(err)
	}
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil {
		return nil, refused(fmt.Errorf("no answer to PING over TLS: %w", err))
	}
	if line == "" || (line[0] != '+' && line[0] != '-') {
		return nil, fmt.Errorf("not a Redis reply to PING over TLS: %q", strings.TrimSpace(line))
	}
	st := tc.ConnectionState()
	return &st, nil
}

// WrapDialer returns a dialer that opens a connection with dial and does the
// TLS handshake over it with cfg (the server name, when cfg has none, is the
// address's host): go-redis applies its TLSConfig only in its own dialer, not
// in one given as Options.Dialer. cfg nil returns dial.
func WrapDialer(dial Dialer, cfg *tls.Config) Dialer {
	if cfg == nil || dial == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := cfg
		if cc.ServerName == "" {
			cc = cfg.Clone()
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cc.ServerName = host
			}
		}
		tc := tls.Client(c, cc)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// PingRefused reports whether err is the server refusing PING itself for
// the user's ACL (NOPERM naming the ping command): an answer, so the server
// is reached. Any other error, another command's refusal included (a cluster
// client's PING first sends CLUSTER SLOTS), is not.
func PingRefused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") && strings.Contains(strings.ToLower(msg), "'ping'")
}
