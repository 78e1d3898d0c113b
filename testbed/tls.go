package testbed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// WithTLS starts every server TLS-only: `port 0` and `tls-port` on the port the
// plaintext one would have, with a certificate of its own signed by a CA the
// topology generates in its directory (removed by Close). Replication, the
// sentinels' links and the cluster bus use TLS too (`tls-replication yes`,
// `tls-cluster yes`). Servers ask clients for a certificate but do not require
// one (`tls-auth-clients optional`). Clients made by Client and NodeClient, and
// Admin, connect with TLS and trust the CA; TLSConfig gives the same
// configuration to other clients, TLSFiles the files. The proxies stay in
// every link: they relay the TLS bytes. Not with WithContainers.
func WithTLS() Option { return func(c *config) { c.tls = true } }

// TLSFiles are the PEM files of a topology started WithTLS.
type TLSFiles struct {
	// CA is the certificate of the CA that signed every server's and the
	// client's certificate.
	CA string
	// ClientCert and ClientKey are a client certificate signed by the CA.
	ClientCert, ClientKey string
}

// tlsState is a WithTLS topology's CA and client configuration.
type tlsState struct {
	dir    string
	files  TLSFiles
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	client *tls.Config
}

// certValidity is how long the generated certificates are valid: a topology
// lives for a test or a scenario.
const certValidity = 24 * time.Hour

func newTLSState(dir string) (*tlsState, error) {
	s := &tlsState{dir: filepath.Join(dir, "tls")}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "coordtorture testbed CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if s.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	s.caKey = key
	s.files.CA = filepath.Join(s.dir, "ca.crt")
	if err := writePEM(s.files.CA, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	s.files.ClientCert, s.files.ClientKey = filepath.Join(s.dir, "client.crt"), filepath.Join(s.dir, "client.key")
	if err := s.issue("coordtorture testbed client", nil, s.files.ClientCert, s.files.ClientKey); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(s.files.ClientCert, s.files.ClientKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.caCert)
	s.client = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{pair}}
	return s, nil
}

// issue writes a certificate signed by the CA and its key. With ips it is a
// server's (serverAuth and clientAuth: a server presents it on its own
// outgoing links too), with SANs for ips, 127.0.0.1, ::1 and localhost;
// without, a client's.
func (s *tlsState) issue(cn string, ips []string, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if ips != nil {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		for _, ip := range ips {
			if p := net.ParseIP(ip); p != nil && !p.Equal(net.IPv4(127, 0, 0, 1)) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, p)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.caCert, &key.PublicKey, s.caKey)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", kder)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// TLSConfig is a configuration for clients of a topology started WithTLS: it
// trusts the topology's CA and presents its client certificate. Every call
// returns a fresh copy. Nil without WithTLS.
func (t *Topology) TLSConfig() *tls.Config {
	if t.tls == nil {
		return nil
	}
	return t.tls.client.Clone()
}

// TLSFiles returns the PEM files of a topology started WithTLS (ok false
// without it).
func (t *Topology) TLSFiles() (files TLSFiles, ok bool) {
	if t.tls == nil {
		return TLSFiles{}, false
	}
	return t.tls.files, true
}

// issueCert issues the node's certificate (WithTLS), for its own address
// and the announced one.
func (n *Node) issueCert() error {
	s := n.topo.tls
	if s == nil {
		return nil
	}
	cert, key := n.tlsPaths()
	if err := s.issue("coordtorture testbed "+n.Name, []string{n.ip, n.topo.announce}, cert, key); err != nil {
		return fmt.Errorf("testbed: %s certificate: %w", n.Name, err)
	}
	return nil
}

func (n *Node) tlsPaths() (cert, key string) {
	return filepath.Join(n.dir, "tls.crt"), filepath.Join(n.dir, "tls.key")
}

// tlsConf is the TLS part of a node's configuration ("" without WithTLS).
func (n *Node) tlsConf() string {
	s := n.topo.tls
	if s == nil {
		return ""
	}
	cert, key := n.tlsPaths()
	conf := fmt.Sprintf("port 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients optional\ntls-replication yes\n",
		serverPort, cert, key, s.files.CA)
	if n.topo.Kind == KindCluster && !n.Aux && !n.Sentinel {
		conf += "tls-cluster yes\n"
	}
	return conf
}
