package prim_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The baseline every lock is compared with: SET NX PX to acquire, a
// compare-and-delete script to release; no fencing token at all.
var casDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkLockPair measures one acquire+release pair of each implementation on
// the same server in the same run: on one connection (serial) and from 32
// goroutines on distinct keys (parallel). Clients connect straight to the
// server, not through the testbed's proxies, so the figures compare the
// implementations rather than the proxy; compare ratios, not absolute times.
func BenchmarkLockPair(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	impls := []struct {
		name string
		pair func(c redis.UniversalClient) func(key string) error
	}{
		{"prim", func(c redis.UniversalClient) func(string) error {
			co := prim.New(c)
			return func(key string) error {
				l, err := co.TryAcquireFencedLock(ctx, "{"+key+"}:lease", "{"+key+"}:fence", 10*time.Second)
				if err != nil {
					return err
				}
				_, err = l.Release(ctx)
				return err
			}
		}},
		{"redislock", func(c redis.UniversalClient) func(string) error {
			lc := redislock.New(c)
			return func(key string) error {
				l, err := lc.Obtain(ctx, key, 10*time.Second, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
		{"setnx+script", func(c redis.UniversalClient) func(string) error {
			return func(key string) error {
				ok, err := c.SetNX(ctx, key, "owner", 10*time.Second).Result()
				if err != nil || !ok {
					return fmt.Errorf("setnx: %v %v", ok, err)
				}
				return casDelete.Run(ctx, c, []string{key}, "owner").Err()
			}
		}},
	}
	for _, impl := range impls {
		b.Run(impl.name+"/serial", func(b *testing.B) {
			c := direct(b, topo, 1)
			pair := impl.pair(c)
			key := fmt.Sprintf("bench:%s:serial:%d", impl.name, time.Now().UnixNano())
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := pair(key); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(impl.name+"/parallel32", func(b *testing.B) {
			c := direct(b, topo, 32)
			pair := impl.pair(c)
			var seq atomic.Int64
			run := time.Now().UnixNano()
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:%s:par:%d:%d", impl.name, run, seq.Add(1))
				for pb.Next() {
					if err := pair(key); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// direct is a client to the server's real address with a pool of the given size.
func direct(b *testing.B, topo *testbed.Topology, pool int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: topo.Nodes()[0].Admin().Options().Addr, PoolSize: pool})
	b.Cleanup(func() { c.Close() })
	return c
}
