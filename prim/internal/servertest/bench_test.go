package servertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/prim/internal/knobs"
	"github.com/coordtorture/coordtorture/testbed"
)

// The baseline every lock is compared with: SET NX PX of a random owner token
// to acquire, a compare-and-delete script to release; no fencing token at all.
// The token is random per acquisition, as any lock's must be (a constant would
// let every owner release every other's lease), and is made the same way as
// prim's.
var casDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func randomOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// lockImpl builds, for one client and one lock name, an acquire+release pair.
// Keys are built once, outside the measured loop.
type lockImpl struct {
	name string
	pair func(c redis.UniversalClient, key string) func() error
}

// primPair is prim's acquire+release pair on co.
func primPair(ctx context.Context, co *prim.Coordinator, key string) func() error {
	lease, fence := "{"+key+"}:lease", "{"+key+"}:fence"
	return func() error {
		l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
		if err != nil {
			return err
		}
		_, err = l.Release(ctx)
		return err
	}
}

// lockImpls are the implementations compared: prim as it runs (its release
// is DELEX where the server has it), prim-scripts (prim forced onto its
// scripts, as on a server without DELEX), redislock, and the baseline, last.
func lockImpls(ctx context.Context) []lockImpl {
	return []lockImpl{
		{"prim", func(c redis.UniversalClient, key string) func() error {
			return primPair(ctx, prim.New(c), key)
		}},
		{"prim-scripts", func(c redis.UniversalClient, key string) func() error {
			defer knobs.SetForceFallback(true)()
			return primPair(ctx, prim.New(c), key)
		}},
		{"redislock", func(c redis.UniversalClient, key string) func() error {
			lc := redislock.New(c)
			return func() error {
				l, err := lc.Obtain(ctx, key, 10*time.Second, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
		{"setnx+script", func(c redis.UniversalClient, key string) func() error {
			keys := []string{key}
			return func() error {
				owner := randomOwner()
				ok, err := c.SetNX(ctx, key, owner, 10*time.Second).Result()
				if err != nil || !ok {
					return fmt.Errorf("setnx: %v %v", ok, err)
				}
				return casDelete.Run(ctx, c, keys, owner).Err()
			}
		}},
	}
}

// BenchmarkLockPair measures one acquire+release pair of each implementation on
// the same server in the same run: on one connection (serial) and from 32
// goroutines on distinct keys (parallel). Clients connect straight to the
// server, not through the testbed's proxies, so the figures compare the
// implementations rather than the proxy; compare ratios, not absolute times
// (BenchmarkLockPairRatio interleaves them for that).
//
// Besides time, each reports what the server spent per pair: srv-cpu-µs/op is
// the server process's CPU time (INFO cpu: parsing, networking and execution),
// srv-exec-µs/op the commands' execution time alone (INFO commandstats usec,
// which includes the Lua scripts' work).
func BenchmarkLockPair(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	admin := topo.Nodes()[0].Admin()
	for _, impl := range lockImpls(ctx) {
		b.Run(impl.name+"/serial", func(b *testing.B) {
			c := direct(b, topo, 1)
			pair := impl.pair(c, fmt.Sprintf("bench:%s:serial:%d", impl.name, time.Now().UnixNano()))
			if err := pair(); err != nil { // loads the scripts
				b.Fatal(err)
			}
			before := readServerCost(ctx, admin)
			b.ReportAllocs()
			for b.Loop() {
				if err := pair(); err != nil {
					b.Fatal(err)
				}
			}
			readServerCost(ctx, admin).sub(before).report(b)
		})
		b.Run(impl.name+"/parallel32", func(b *testing.B) {
			c := direct(b, topo, 32)
			var seq atomic.Int64
			run := time.Now().UnixNano()
			if err := impl.pair(c, fmt.Sprintf("bench:%s:par:%d:warm", impl.name, run))(); err != nil {
				b.Fatal(err)
			}
			before := readServerCost(ctx, admin)
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				pair := impl.pair(c, fmt.Sprintf("bench:%s:par:%d:%d", impl.name, run, seq.Add(1)))
				for pb.Next() {
					if err := pair(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			readServerCost(ctx, admin).sub(before).report(b)
		})
	}
}

// BenchmarkLockPairRatio runs every implementation in short alternating blocks
// within one benchmark, so the machine's load drifts affect all of them alike,
// and reports each one's throughput relative to the setnx+script baseline
// (baseline time / its time; 1.0 = as fast), and prim's relative to
// redislock's (prim/redislock, prim-scripts/redislock). One iteration is one
// block of each:
// 200 pairs serially, or 32 goroutines × 25 pairs. Use e.g. -benchtime=50x.
func BenchmarkLockPairRatio(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	impls := lockImpls(ctx)
	for _, mode := range []struct {
		name         string
		procs, pairs int
	}{{"serial", 1, 200}, {"parallel32", 32, 25}} {
		b.Run(mode.name, func(b *testing.B) {
			run := time.Now().UnixNano()
			// pairs[i][g] is goroutine g's pair function of implementation i.
			pairs := make([][]func() error, len(impls))
			for i, impl := range impls {
				c := direct(b, topo, mode.procs)
				for g := range mode.procs {
					p := impl.pair(c, fmt.Sprintf("bench:ratio:%s:%s:%d:%d", mode.name, impl.name, run, g))
					if err := p(); err != nil {
						b.Fatal(err)
					}
					pairs[i] = append(pairs[i], p)
				}
			}
			spent := make([]time.Duration, len(impls))
			k := 0
			for b.Loop() {
				for j := range impls {
					i := (j + k) % len(impls) // rotate the order each iteration
					start := time.Now()
					var wg sync.WaitGroup
					for _, p := range pairs[i] {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range mode.pairs {
								if err := p(); err != nil {
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
			n := float64(b.N * mode.procs * mode.pairs)
			base := spent[len(impls)-1] // setnx+script
			var redislock time.Duration
			for i, impl := range impls {
				b.ReportMetric(float64(spent[i].Nanoseconds())/n/1e3, impl.name+"-µs/pair")
				if i != len(impls)-1 {
					b.ReportMetric(base.Seconds()/spent[i].Seconds(), impl.name+"/baseline")
				}
				if impl.name == "redislock" {
					redislock = spent[i]
				}
			}
			// prim's throughput relative to redislock's (redislock time / its
			// time; above 1.0 prim is faster).
			for i, impl := range impls {
				if strings.HasPrefix(impl.name, "prim") {
					b.ReportMetric(redislock.Seconds()/spent[i].Seconds(), impl.name+"/redislock")
				}
			}
		})
	}
}

// serverCost is the server's cumulative CPU time and command execution time.
type serverCost struct {
	cpu, exec time.Duration
}

func readServerCost(ctx context.Context, a *redis.Client) serverCost {
	var s serverCost
	info, err := a.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return s
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += time.Duration(f * float64(time.Second))
		}
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		_, rest, _ := strings.Cut(line, ",usec=")
		us, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		s.exec += time.Duration(us) * time.Microsecond
	}
	return s
}

func (s serverCost) sub(o serverCost) serverCost { return serverCost{s.cpu - o.cpu, s.exec - o.exec} }

func (s serverCost) report(b *testing.B) {
	if b.N == 0 {
		return
	}
	b.ReportMetric(float64(s.cpu.Nanoseconds())/float64(b.N)/1e3, "srv-cpu-µs/op")
	b.ReportMetric(float64(s.exec.Nanoseconds())/float64(b.N)/1e3, "srv-exec-µs/op")
}

// direct is a client to the server's real address with a pool of the given size.
func direct(b *testing.B, topo *testbed.Topology, pool int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: topo.Nodes()[0].Admin().Options().Addr, PoolSize: pool})
	b.Cleanup(func() { c.Close() })
	return c
}
