package prim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// waitingLock is one implementation's blocking acquire + release.
type waitingLock interface {
	try(ctx context.Context) (func(), error)  // immediate
	wait(ctx context.Context) (func(), error) // blocks until acquired
}

type primWaiting struct {
	co          *prim.Coordinator
	lease, fnce string
}

func (p primWaiting) try(ctx context.Context) (func(), error) {
	l, err := p.co.TryAcquireFencedLock(ctx, p.lease, p.fnce, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return func() { l.Release(ctx) }, nil
}
func (p primWaiting) wait(ctx context.Context) (func(), error) {
	l, err := p.co.AcquireFencedLock(ctx, p.lease, p.fnce, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return func() { l.Release(ctx) }, nil
}

// redislock has no retry by default; its documented waiting set-up is a
// linear back-off, used here as the README shows it (100ms).
type redislockWaiting struct {
	c   *redislock.Client
	key string
}

func (r redislockWaiting) try(ctx context.Context) (func(), error) {
	l, err := r.c.Obtain(ctx, r.key, 10*time.Second, nil)
	if err != nil {
		return nil, err
	}
	return func() { l.Release(ctx) }, nil
}
func (r redislockWaiting) wait(ctx context.Context) (func(), error) {
	l, err := r.c.Obtain(ctx, r.key, 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return func() { l.Release(ctx) }, nil
}

// redsync with its defaults (32 tries, 50–250ms random delay); waiting longer
// than its tries allow is retried here so a hand-off always completes.
type redsyncWaiting struct {
	rs  *redsync.Redsync
	key string
}

func (r redsyncWaiting) try(ctx context.Context) (func(), error) {
	m := r.rs.NewMutex(r.key, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		return nil, err
	}
	return func() { m.UnlockContext(ctx) }, nil
}
func (r redsyncWaiting) wait(ctx context.Context) (func(), error) {
	for {
		m := r.rs.NewMutex(r.key, redsync.WithExpiry(10*time.Second))
		err := m.LockContext(ctx)
		if err == nil {
			return func() { m.UnlockContext(ctx) }, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
}

func waitingImpls(c *redis.Client, tag string) []struct {
	name string
	l    waitingLock
} {
	return []struct {
		name string
		l    waitingLock
	}{
		{"prim", primWaiting{prim.New(c), "{ho" + tag + "}:lease", "{ho" + tag + "}:fence"}},
		{"redislock", redislockWaiting{redislock.New(c), "ho-rl" + tag}},
		{"redsync", redsyncWaiting{redsync.New(goredis.NewPool(c)), "ho-rs" + tag}},
	}
}

// BenchmarkHandOff measures release → waiter's acquisition returning, for each
// implementation in the same run, on a direct loopback connection. Run it with
// -benchtime=1000x for 1,000 hand-offs; it reports p50 and p99 in µs.
func BenchmarkHandOff(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	c := direct(b, topo, 8)
	ctx := context.Background()
	for _, impl := range waitingImpls(c, fmt.Sprint(time.Now().UnixNano())) {
		b.Run(impl.name, func(b *testing.B) {
			lats := make([]time.Duration, 0, b.N)
			release, err := impl.l.try(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				var wg sync.WaitGroup
				var next func()
				var werr error
				var got time.Time
				wg.Add(1)
				go func() {
					defer wg.Done()
					next, werr = impl.l.wait(ctx)
					got = time.Now()
				}()
				// Let the waiter settle into its wait; the release then lands at a
				// random point of a polling peer's retry cycle.
				time.Sleep(10*time.Millisecond + rand.N(10*time.Millisecond))
				start := time.Now()
				release()
				wg.Wait()
				if werr != nil {
					b.Fatal(werr)
				}
				lats = append(lats, got.Sub(start))
				release = next
			}
			release()
			b.StopTimer()
			slices.Sort(lats)
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
		})
	}
	// One round trip on the same connection, for scale.
	b.Run("ping-rtt", func(b *testing.B) {
		for b.Loop() {
			c.Ping(ctx)
		}
	})
}

// BenchmarkIdleWaiters reports how many commands per second the server receives
// while 100 waiters of each implementation wait on a held lock.
func BenchmarkIdleWaiters(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	c := direct(b, topo, 120)
	admin := topo.Nodes()[0].Admin()
	for _, impl := range waitingImpls(c, fmt.Sprint(time.Now().UnixNano())) {
		b.Run(impl.name, func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				release, err := impl.l.try(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				for range 100 {
					wg.Add(1)
					go func() { defer wg.Done(); impl.l.wait(ctx) }()
				}
				time.Sleep(time.Second) // all waiting
				before := serverCalls(ctx, admin)
				const window = 3 * time.Second
				time.Sleep(window)
				rate := float64(serverCalls(ctx, admin)-before) / window.Seconds()
				cancel()
				wg.Wait()
				release()
				b.ReportMetric(rate, "cmds/s")
			}
		})
	}
}

func benchBuild() string {
	if m := testbed.Matrix(); len(m) == 1 {
		return m[0]
	}
	return testbed.DefaultBuild
}
