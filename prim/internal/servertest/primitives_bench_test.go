package servertest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// primitiveOp is one measured operation of a primitive on one client: per
// goroutine, setup returns the op (keys made once, outside the loop).
type primitiveOp struct {
	name  string
	setup func(b *testing.B, c *redis.Client, key string) func() error
}

// setnxPair is the baseline every pair is compared with: SET NX PX of a
// random owner token, then a compare-and-delete script (bench_test.go).
func setnxPair(ctx context.Context) primitiveOp {
	return primitiveOp{"setnx+script", func(b *testing.B, c *redis.Client, key string) func() error {
		return func() error {
			owner := randomOwner()
			if err := c.SetNX(ctx, key, owner, 10*time.Second).Err(); err != nil {
				return err
			}
			return casDelete.Run(ctx, c, []string{key}, owner).Err()
		}
	}}
}

func rwPair(ctx context.Context, write bool) primitiveOp {
	name := "rw-read"
	if write {
		name = "rw-write"
	}
	return primitiveOp{name, func(b *testing.B, c *redis.Client, key string) func() error {
		co := prim.New(c)
		acq := co.TryAcquireReadLock
		if write {
			acq = co.TryAcquireWriteLock
		}
		return func() error {
			l, err := acq(ctx, key, 10*time.Second)
			if err != nil {
				return err
			}
			_, err = l.Release(ctx)
			return err
		}
	}}
}

// countDown is one signal of a latch generation with a count that never runs
// out during the benchmark.
func countDown(ctx context.Context) primitiveOp {
	return primitiveOp{"count-down", func(b *testing.B, c *redis.Client, key string) func() error {
		l, err := prim.New(c).ResetCountdownLatch(ctx, key, 1<<60)
		if err != nil {
			b.Fatal(err)
		}
		return func() error {
			_, err := l.CountDown(ctx)
			return err
		}
	}}
}

// runPrimitiveOps runs every op serially and with 32 goroutines (each on a
// key of its own), reporting the server's cost per op beside the time.
func runPrimitiveOps(b *testing.B, ops []primitiveOp) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	admin := topo.Nodes()[0].Admin()
	for _, op := range ops {
		b.Run(op.name+"/serial", func(b *testing.B) {
			c := direct(b, topo, 1)
			f := op.setup(b, c, fmt.Sprintf("bench:%s:serial:%d", op.name, time.Now().UnixNano()))
			if err := f(); err != nil { // loads the scripts
				b.Fatal(err)
			}
			before := readServerCost(ctx, admin)
			b.ReportAllocs()
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
			readServerCost(ctx, admin).sub(before).report(b)
		})
		b.Run(op.name+"/parallel32", func(b *testing.B) {
			c := direct(b, topo, 32)
			var seq atomic.Int64
			run := time.Now().UnixNano()
			if err := op.setup(b, c, fmt.Sprintf("bench:%s:par:%d:warm", op.name, run))(); err != nil {
				b.Fatal(err)
			}
			before := readServerCost(ctx, admin)
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				f := op.setup(b, c, fmt.Sprintf("bench:%s:par:%d:%d", op.name, run, seq.Add(1)))
				for pb.Next() {
					if err := f(); err != nil {
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

// BenchmarkPrimitives: acquire+release pairs of a read lease and of a write
// lease, and single count-down signals, beside the SET NX PX baseline pair, at
// 1 and 32 goroutines on one server. Every operation is one round trip (a pair
// two).
func BenchmarkPrimitives(b *testing.B) {
	ctx := context.Background()
	runPrimitiveOps(b, []primitiveOp{rwPair(ctx, false), rwPair(ctx, true), countDown(ctx), setnxPair(ctx)})
}

// BenchmarkPrimitivesRatio runs the operations of BenchmarkPrimitives in short
// alternating blocks within one benchmark, so load drifts of the machine hit
// all of them alike, and reports each one's time per operation and its time
// relative to the SET NX PX baseline pair (its time / baseline time; below 1.0
// it is cheaper than the pair). One iteration is one block of each: 200
// operations serially, or 32 goroutines × 25. Use e.g. -benchtime=30x.
func BenchmarkPrimitivesRatio(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ops := []primitiveOp{rwPair(ctx, false), rwPair(ctx, true), countDown(ctx), setnxPair(ctx)}
	for _, mode := range []struct {
		name       string
		procs, per int
	}{{"serial", 1, 200}, {"parallel32", 32, 25}} {
		b.Run(mode.name, func(b *testing.B) {
			run := time.Now().UnixNano()
			fs := make([][]func() error, len(ops))
			for i, op := range ops {
				c := direct(b, topo, mode.procs)
				for g := range mode.procs {
					f := op.setup(b, c, fmt.Sprintf("bench:pratio:%s:%s:%d:%d", mode.name, op.name, run, g))
					if err := f(); err != nil {
						b.Fatal(err)
					}
					fs[i] = append(fs[i], f)
				}
			}
			spent := make([]time.Duration, len(ops))
			k := 0
			for b.Loop() {
				for j := range ops {
					i := (j + k) % len(ops) // rotate the order each iteration
					start := time.Now()
					var wg sync.WaitGroup
					for _, f := range fs[i] {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range mode.per {
								if err := f(); err != nil {
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
			n := float64(b.N * mode.procs * mode.per)
			base := spent[len(ops)-1]
			for i, op := range ops {
				b.ReportMetric(float64(spent[i].Nanoseconds())/n/1e3, op.name+"-µs/op")
				if i != len(ops)-1 {
					b.ReportMetric(spent[i].Seconds()/base.Seconds(), op.name+"/baseline")
				}
			}
		})
	}
}
