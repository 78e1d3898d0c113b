package servertest_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/testbed"
)

// One standalone server per build serves every test of the package; tests use
// keys of their own. Tests that inject faults dial as their own peer so their
// links are theirs alone.
var (
	serversMu sync.Mutex
	servers   = map[string]*testbed.Topology{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	// A rapid failure is reported in the test output with its seed; no fail
	// files are written into the source tree.
	_ = flag.Set("rapid.nofailfile", "true")
	if spec := os.Getenv(holderEnv); spec != "" {
		os.Exit(runHolder(spec)) // the other process of BenchmarkHandOffAcrossProcesses
	}
	if spec := os.Getenv(herdEnv); spec != "" {
		os.Exit(runHerd(spec)) // a helper process of BenchmarkHerd
	}
	code := func() int {
		defer func() {
			serversMu.Lock()
			for _, s := range servers {
				s.Close()
			}
			serversMu.Unlock()
			closeSets()
		}()
		return m.Run()
	}()
	os.Exit(code)
}

func server(build string) (*testbed.Topology, error) {
	serversMu.Lock()
	defer serversMu.Unlock()
	if s, ok := servers[build]; ok {
		return s, nil
	}
	s, err := testbed.NewStandalone(context.Background(), build)
	if err != nil {
		return nil, err
	}
	servers[build] = s
	return s, nil
}

// forEachBuild runs f against a shared standalone server of every build of the
// matrix. A build that cannot start fails the test.
func forEachBuild(t *testing.T, f func(t *testing.T, env *env)) {
	t.Helper()
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			topo, err := server(b)
			if err != nil {
				t.Fatal(err)
			}
			f(t, newEnv(t, topo))
		})
	}
}

// forEachCluster runs f on a 3-primary cluster (no replicas) of each build of
// the matrix, with a cluster client of default options and a two-minute
// context.
func forEachCluster(t *testing.T, f func(t *testing.T, ctx context.Context, c redis.UniversalClient)) {
	t.Helper()
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			c, err := testbed.Cluster(t, b, 3, 0).Client()
			if err != nil {
				t.Fatal(err)
			}
			f(t, ctx, c)
		})
	}
}

type env struct {
	topo  *testbed.Topology
	admin *redis.Client // straight to the server, for inspection
	ns    string        // a key namespace of this test
	peer  string
}

var peerSeq atomic.Int64

func newEnv(t *testing.T, topo *testbed.Topology) *env {
	ns := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":"
	return &env{topo: topo, admin: topo.Nodes()[0].Admin(), ns: ns, peer: fmt.Sprintf("p%d", peerSeq.Add(1))}
}

// client returns a client of this test's own peer with a command counter.
func (e *env) client(t *testing.T, opts ...testbed.ClientOption) (redis.UniversalClient, *counter) {
	t.Helper()
	c, err := e.topo.Client(append([]testbed.ClientOption{testbed.AsPeer(e.peer)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctr := &counter{}
	c.AddHook(ctr)
	return c, ctr
}

// k namespaces a key under the test's name, keeping a hash tag intact.
func (e *env) k(key string) string { return e.ns + key }

// counter counts commands a client sends (handshakes included).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
func (c *counter) get() int64 { return c.n.Load() }
