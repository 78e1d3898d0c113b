package testbed_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/testbed"
)

// WithTLS serves clients over TLS only, through the proxies: the topology's
// clients work, a client trusting only the CA file works, and a plaintext
// client is refused. (Replication, the sentinels' links and the cluster bus
// over TLS: prim/internal/servertest's TestFencedLockOverTLS starts those
// topologies; they come up only when those links work.)
func TestTLSTopologies(t *testing.T) {
	forEachBuild(t, func(t *testing.T, build string) {
		ctx := ctxT(t, 2*time.Minute)
		t.Run("standalone", func(t *testing.T) {
			topo := testbed.Standalone(t, build, testbed.WithTLS())
			c := mustClient(t, topo)
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if got := topo.Node("n1").Admin().Get(ctx, "k").Val(); got != "v" {
				t.Fatalf("admin reads %q, want v", got)
			}
			files, ok := topo.TLSFiles()
			if !ok {
				t.Fatal("TLSFiles: not ok on a WithTLS topology")
			}
			pem, err := os.ReadFile(files.CA)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				t.Fatal("the CA file holds no certificate")
			}
			// Straight to the server (its own loopback address, not 127.0.0.1),
			// with the CA file only: the server's certificate names its address.
			direct := redis.NewClient(&redis.Options{Addr: topo.Node("n1").DirectAddr(),
				TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
			defer direct.Close()
			if got, err := direct.Get(ctx, "k").Result(); err != nil || got != "v" {
				t.Fatalf("a client trusting the CA file reads %q, %v", got, err)
			}
			plain := redis.NewClient(&redis.Options{Addr: topo.Node("n1").DirectAddr(), MaxRetries: -1, DialTimeout: time.Second})
			defer plain.Close()
			if err := plain.Ping(ctx).Err(); err == nil {
				t.Fatal("a plaintext client's PING succeeded on a TLS-only server")
			}
			if _, ok := (&testbed.Topology{}).TLSFiles(); ok {
				t.Fatal("TLSFiles: ok without WithTLS")
			}
		})
	})
}
