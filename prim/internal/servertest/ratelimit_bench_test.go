package servertest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// decider makes one rate-limiting decision for one permit.
type decider func() error

// rateImpl builds, for one client and one key, a decision function. The
// limits (a million per second) are high enough that the decisions are grants
// (the write path), with each algorithm's state as it is under a steady load:
// the fixed window's counter, the sliding window's hash of its segments (10
// per second: 10 or 11 fields), the bucket's two fields, redis_rate's GCRA
// time.
type rateImpl struct {
	name string
	make func(c *redis.Client, key string) (decider, error)
}

const benchRate = 1_000_000 // permits per second: every decision a grant

func primDecider(mk func(f *prim.RateLimiters, key string) (*prim.Limiter, error)) func(c *redis.Client, key string) (decider, error) {
	return func(c *redis.Client, key string) (decider, error) {
		l, err := mk(prim.New(c).RateLimiters(), key)
		if err != nil {
			return nil, err
		}
		ctx := context.Background()
		return func() error {
			d, err := l.Allow(ctx, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("refused: %+v", d)
			}
			return err
		}, nil
	}
}

// rateImpls: prim's three algorithms (the fixed window by its script: no
// build has INCREX) and go-redis/redis_rate's GCRA Allow, last.
var rateImpls = []rateImpl{
	{"prim-fixed", primDecider(func(f *prim.RateLimiters, key string) (*prim.Limiter, error) {
		return f.FixedWindow(key, benchRate, time.Second)
	})},
	{"prim-sliding", primDecider(func(f *prim.RateLimiters, key string) (*prim.Limiter, error) {
		return f.SlidingWindow(key, benchRate, time.Second, 10)
	})},
	{"prim-bucket", primDecider(func(f *prim.RateLimiters, key string) (*prim.Limiter, error) {
		return f.TokenBucket(key, benchRate, benchRate, time.Second)
	})},
	{"redis_rate", func(c *redis.Client, key string) (decider, error) {
		l := redis_rate.NewLimiter(c)
		lim := redis_rate.Limit{Rate: benchRate, Burst: benchRate, Period: time.Second}
		ctx := context.Background()
		return func() error {
			r, err := l.Allow(ctx, key, lim)
			if err == nil && r.Allowed != 1 {
				err = fmt.Errorf("refused: %+v", r)
			}
			return err
		}, nil
	}},
}

// BenchmarkRateLimit measures each implementation's decisions alone, serially
// and with 32 goroutines (one key each), with what the server spent per
// decision (srv-cpu-µs/op, srv-exec-µs/op: see BenchmarkLockPair).
func BenchmarkRateLimit(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	admin := topo.Nodes()[0].Admin()
	for _, impl := range rateImpls {
		b.Run(impl.name+"/serial", func(b *testing.B) {
			c := direct(b, topo, 1)
			d, err := impl.make(c, fmt.Sprintf("bench:rl:%s:serial:%d", impl.name, time.Now().UnixNano()))
			if err != nil {
				b.Fatal(err)
			}
			if err := d(); err != nil { // loads the script
				b.Fatal(err)
			}
			before := readServerCost(ctx, admin)
			b.ReportAllocs()
			for b.Loop() {
				if err := d(); err != nil {
					b.Fatal(err)
				}
			}
			readServerCost(ctx, admin).sub(before).report(b)
		})
		b.Run(impl.name+"/parallel32", func(b *testing.B) {
			c := direct(b, topo, 32)
			var seq atomic.Int64
			run := time.Now().UnixNano()
			before := readServerCost(ctx, admin)
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				d, err := impl.make(c, fmt.Sprintf("bench:rl:%s:par:%d:%d", impl.name, run, seq.Add(1)))
				if err != nil {
					b.Error(err)
					return
				}
				for pb.Next() {
					if err := d(); err != nil {
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

// BenchmarkRateLimitRatio runs every implementation in short alternating
// blocks within one benchmark, so the machine's load drifts affect all alike,
// and reports each one's time per decision and prim's throughput relative to
// redis_rate's (redis_rate time / its time; above 1.0 prim is faster). One
// iteration is one block of each: 200 decisions serially, or 32 goroutines ×
// 25 decisions. Use e.g. -benchtime=100x.
func BenchmarkRateLimitRatio(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name       string
		procs, per int
	}{{"serial", 1, 200}, {"parallel32", 32, 25}} {
		b.Run(mode.name, func(b *testing.B) {
			run := time.Now().UnixNano()
			ds := make([][]decider, len(rateImpls))
			for i, impl := range rateImpls {
				c := direct(b, topo, mode.procs)
				for g := range mode.procs {
					d, err := impl.make(c, fmt.Sprintf("bench:rlratio:%s:%s:%d:%d", mode.name, impl.name, run, g))
					if err == nil {
						err = d()
					}
					if err != nil {
						b.Fatal(err)
					}
					ds[i] = append(ds[i], d)
				}
			}
			spent := make([]time.Duration, len(rateImpls))
			k := 0
			for b.Loop() {
				for j := range rateImpls {
					i := (j + k) % len(rateImpls) // rotate the order each iteration
					start := time.Now()
					var wg sync.WaitGroup
					for _, d := range ds[i] {
						wg.Go(func() {
							for range mode.per {
								if err := d(); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					spent[i] += time.Since(start)
				}
				k++
			}
			n := float64(b.N * mode.procs * mode.per)
			base := spent[len(rateImpls)-1] // redis_rate
			for i, impl := range rateImpls {
				b.ReportMetric(float64(spent[i].Nanoseconds())/n/1e3, impl.name+"-µs/decision")
				if i != len(rateImpls)-1 {
					b.ReportMetric(base.Seconds()/spent[i].Seconds(), impl.name+"/redis_rate")
				}
			}
		})
	}
}
