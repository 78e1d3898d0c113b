package servertest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// redlockImpl builds, for one set of node clients and one key, an
// acquire+release pair, and the acquisition alone timed (for the latency
// benchmark).
type redlockImpl struct {
	name string
	pair func(b *testing.B, cs []redis.UniversalClient, key string) func() (time.Duration, error)
}

func redlockImpls(ctx context.Context) []redlockImpl {
	rs := func(failFast bool) func(b *testing.B, cs []redis.UniversalClient, key string) func() (time.Duration, error) {
		return func(b *testing.B, cs []redis.UniversalClient, key string) func() (time.Duration, error) {
			var pools []redsyncredis.Pool
			for _, c := range cs {
				pools = append(pools, goredis.NewPool(c))
			}
			r := redsync.New(pools...)
			return func() (time.Duration, error) {
				m := r.NewMutex(key, redsync.WithExpiry(10*time.Second), redsync.WithTries(1), redsync.WithFailFast(failFast))
				start := time.Now()
				if err := m.LockContext(ctx); err != nil {
					return 0, err
				}
				acq := time.Since(start)
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = fmt.Errorf("redsync unlock: not ok")
				}
				return acq, err
			}
		}
	}
	return []redlockImpl{
		{"prim", func(b *testing.B, cs []redis.UniversalClient, key string) func() (time.Duration, error) {
			// The node timeout is redsync's default for this expiry (0.05 ×
			// 10s): the same bound for both, and one that a run on a loaded
			// two-core machine (16 goroutines, five servers) does not hit,
			// where prim's default 100ms was seen to.
			g, err := prim.NewRedlockGroup(cs, prim.WithNodeTimeout(500*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			return func() (time.Duration, error) {
				start := time.Now()
				l, err := g.TryAcquire(ctx, key, 10*time.Second)
				if err != nil {
					return 0, err
				}
				acq := time.Since(start)
				ok, err := l.Release(ctx)
				if err == nil && !ok {
					err = fmt.Errorf("prim release: not ok")
				}
				return acq, err
			}
		}},
		// redsync as users get it (it waits for every node's answer) and with
		// WithFailFast (it returns once a quorum answered, as prim does).
		{"redsync", rs(false)},
		{"redsync-failfast", rs(true)},
	}
}

// directClients are clients to the first n nodes' real addresses (no proxy),
// with go-redis's default options but the pool size.
func directClients(b *testing.B, topo *testbed.Topology, n, pool int) []redis.UniversalClient {
	var out []redis.UniversalClient
	for i := range n {
		c := redis.NewClient(&redis.Options{Addr: topo.Node(nodeName(i)).DirectAddr(), PoolSize: pool})
		b.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// BenchmarkRedlockRatio compares prim's Redlock with redsync's on the same 3
// and 5 independent servers in one run: every iteration runs one block of each
// implementation (100 pairs serially, or 16 goroutines × 10 pairs on keys of
// their own), rotating the order, so the machine's load drifts affect them
// alike. It reports each one's µs per acquire+release pair and prim's
// throughput relative to redsync's (redsync time / prim time: above 1.0 prim
// is faster). Clients connect straight to the servers, not through the
// testbed's proxies. Use e.g. -benchtime=20x.
func BenchmarkRedlockRatio(b *testing.B) {
	topo, err := independentSet(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	impls := redlockImpls(ctx)
	for _, nodes := range []int{3, 5} {
		for _, mode := range []struct {
			name         string
			procs, pairs int
		}{{"serial", 1, 100}, {"parallel16", 16, 10}} {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, mode.name), func(b *testing.B) {
				run := time.Now().UnixNano()
				pairs := make([][]func() (time.Duration, error), len(impls))
				for i, impl := range impls {
					cs := directClients(b, topo, nodes, mode.procs)
					for g := range mode.procs {
						p := impl.pair(b, cs, fmt.Sprintf("bench:redlock:%d:%s:%s:%d:%d", nodes, mode.name, impl.name, run, g))
						if _, err := p(); err != nil { // loads the scripts
							b.Fatal(err)
						}
						pairs[i] = append(pairs[i], p)
					}
				}
				spent := runBlocks(b, pairs, mode.pairs)
				n := float64(b.N * mode.procs * mode.pairs)
				for i, impl := range impls {
					b.ReportMetric(float64(spent[i].Nanoseconds())/n/1e3, impl.name+"-µs/pair")
				}
				b.ReportMetric(spent[1].Seconds()/spent[0].Seconds(), "prim/redsync")
				b.ReportMetric(spent[2].Seconds()/spent[0].Seconds(), "prim/redsync-failfast")
			})
		}
	}
}

// runBlocks runs b.N iterations of one block of every implementation (each
// of its goroutines running `per` pairs), rotating the order, and returns
// each implementation's total time.
func runBlocks(b *testing.B, pairs [][]func() (time.Duration, error), per int) []time.Duration {
	spent := make([]time.Duration, len(pairs))
	k := 0
	for b.Loop() {
		for j := range pairs {
			i := (j + k) % len(pairs)
			start := time.Now()
			var wg sync.WaitGroup
			for _, p := range pairs[i] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if _, err := p(); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			spent[i] += time.Since(start)
		}
		k++
	}
	return spent
}

// BenchmarkRedlockLatency shows that an acquisition costs about one round
// trip to the slowest member of the fastest majority, not the sum of the
// nodes' round trips: three nodes behind the testbed's proxies with 2ms, 2ms
// and 10ms of latency each way (round trips of about 4, 4 and 20ms). prim's
// acquisition should take about 4ms (parallel, returning at a quorum), and its
// release as much; sequential calls would take 28ms; redsync by default waits
// for the 20ms node. One iteration is a block of 10 serial pairs of each
// implementation. It reports each one's acquisition and pair time in ms.
func BenchmarkRedlockLatency(b *testing.B) {
	topo, err := independentSet(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	peer := fmt.Sprintf("bench-lat-%d", peerSeq.Add(1))
	var cs []redis.UniversalClient
	for i, lat := range []time.Duration{2 * time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond} {
		c, err := topo.NodeClient(nodeName(i), testbed.AsPeer(peer))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cs = append(cs, c)
		l, err := topo.Link(peer, nodeName(i))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Latency(lat, 0); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Heal() })
	}
	impls := redlockImpls(ctx)
	run := time.Now().UnixNano()
	pairs := make([]func() (time.Duration, error), len(impls))
	for i, impl := range impls {
		pairs[i] = impl.pair(b, cs, fmt.Sprintf("bench:redlock-lat:%s:%d", impl.name, run))
		if _, err := pairs[i](); err != nil {
			b.Fatal(err)
		}
	}
	const per = 10
	spent := make([]time.Duration, len(impls))
	acq := make([]time.Duration, len(impls))
	k := 0
	for b.Loop() {
		for j := range impls {
			i := (j + k) % len(impls)
			start := time.Now()
			for range per {
				a, err := pairs[i]()
				if err != nil {
					b.Fatal(err)
				}
				acq[i] += a
			}
			spent[i] += time.Since(start)
		}
		k++
	}
	n := float64(b.N * per)
	for i, impl := range impls {
		b.ReportMetric(acq[i].Seconds()*1e3/n, impl.name+"-acquire-ms")
		b.ReportMetric(spent[i].Seconds()*1e3/n, impl.name+"-pair-ms")
	}
}
