package servertest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/prim/internal/knobs"
)

// BenchmarkHerd: the cost of one hand-off of a contended waiting lock as the
// number of waiters grows, with prim's per-lock queue (an invalidation wakes the
// head only) beside the landed wake-up (every waiter of the key woken by each
// invalidation: SetWakeEveryWaiterForTest).
//
// The waiters run a relay on one fenced lock (see relay). one-process: n waiters on one Coordinator in this process;
// 4-processes: n waiters in each of 4 helper processes (this test binary started
// again), so 4n in all. Each iteration is a 100ms window of the relay; hand-offs
// are the fencing counter's increments (one per acquisition), commands and
// scripts the server's INFO commandstats (cmdstat_evalsha + cmdstat_eval),
// without the benchmark's own reads.
//
//   - cmds/handoff, scripts/handoff: the server's work per hand-off (the queue:
//     O(1) in local waiters, O(processes) across processes; wake-all: O(waiters));
//   - handoffs/s;
//   - p50-µs (one-process only): from a holder's release to the acquisition by
//     a goroutine that was waiting.
func BenchmarkHerd(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	admin := topo.Nodes()[0].Admin()
	addr := admin.Options().Addr
	tag := fmt.Sprint(time.Now().UnixNano())
	for _, mode := range []string{"queue", "wake-all"} {
		for _, layout := range []string{"one-process", "4-processes"} {
			for _, n := range []int{1, 8, 32, 128} {
				b.Run(fmt.Sprintf("%s/%s/waiters=%d", mode, layout, n), func(b *testing.B) {
					lease := fmt.Sprintf("{herd-%s-%s-%s-%d}:lease", tag, mode, layout, n)
					fence := strings.Replace(lease, ":lease", ":fence", 1)
					var lat *latencies
					if layout == "one-process" {
						restore := knobs.SetWakeEveryWaiter(mode == "wake-all")
						defer restore()
						c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: n + 8})
						defer c.Close()
						co := prim.New(c, prim.WithLogger(slog.New(slog.DiscardHandler)))
						defer co.Close()
						lat = &latencies{}
						stop := relay(co, lease, fence, n, lat)
						defer stop()
					} else {
						for range 4 {
							startHerd(b, fmt.Sprintf("%s %s %d %s %s", addr, mode, n, lease, fence))
						}
					}
					ctx := context.Background()
					time.Sleep(300 * time.Millisecond) // all waiting
					var handoffs, cmds, scripts int64
					for b.Loop() {
						h0, c0, s0 := herdCounts(ctx, admin, fence)
						time.Sleep(100 * time.Millisecond)
						h1, c1, s1 := herdCounts(ctx, admin, fence)
						handoffs += h1 - h0
						cmds += c1 - c0 - 1 // the second herdCounts' GET (INFO is not counted)
						scripts += s1 - s0
					}
					b.StopTimer()
					if handoffs == 0 {
						b.Fatal("no hand-off happened")
					}
					b.ReportMetric(float64(cmds)/float64(handoffs), "cmds/handoff")
					b.ReportMetric(float64(scripts)/float64(handoffs), "scripts/handoff")
					b.ReportMetric(float64(handoffs)/(float64(b.N)*0.1), "handoffs/s")
					if lat != nil {
						b.ReportMetric(float64(lat.p50().Nanoseconds())/1e3, "p50-µs")
					}
				})
			}
		}
	}
}

// herdCounts reads the fencing counter, then the server's command count
// (without INFO) and its script count.
func herdCounts(ctx context.Context, admin *redis.Client, fence string) (handoffs, cmds, scripts int64) {
	handoffs, _ = admin.Get(ctx, fence).Int64()
	cmds, scripts = commandCalls(ctx, admin)
	return handoffs, cmds, scripts
}

type latencies struct {
	mu        sync.Mutex
	releaseAt atomic.Int64
	ds        []time.Duration
}

func (l *latencies) p50() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return pctl(l.ds, 50)
}

// relay starts n+1 goroutines that take turns on the lock until stop: each
// holds it for a millisecond, releases, and stays away for 20ms before it waits
// again, so a release is a hand-off to a sleeping waiter (not the releaser
// taking the lock straight back), and about n of them wait at any time.
func relay(co *prim.Coordinator, lease, fence string, n int, lat *latencies) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				began := time.Now().UnixNano()
				l, err := co.AcquireFencedLock(ctx, lease, fence, 10*time.Second)
				if err != nil {
					continue
				}
				if lat != nil {
					// A hand-off: this goroutine was waiting when the lock was released.
					if t := lat.releaseAt.Load(); t != 0 && began < t {
						lat.mu.Lock()
						lat.ds = append(lat.ds, time.Duration(time.Now().UnixNano()-t))
						lat.mu.Unlock()
					}
				}
				time.Sleep(time.Millisecond)
				if lat != nil {
					lat.releaseAt.Store(time.Now().UnixNano())
				}
				_, _ = l.Release(context.Background())
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// herdEnv names a BenchmarkHerd helper process's job: "addr mode n lease fence".
const herdEnv = "COORDTORTURE_PRIM_HERD"

// startHerd starts a helper process running a relay of n waiters; it stops when
// its stdin closes (at the sub-benchmark's end).
func startHerd(b *testing.B, spec string) {
	_, out := startHelper(b, herdEnv, spec)
	if line, err := out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		b.Fatalf("herd process: %q %v", line, err)
	}
}

// runHerd is a BenchmarkHerd helper process.
func runHerd(spec string) int {
	var addr, mode, lease, fence string
	var n int
	if _, err := fmt.Sscan(spec, &addr, &mode, &n, &lease, &fence); err != nil {
		fmt.Fprintln(os.Stderr, "herd:", err)
		return 2
	}
	knobs.SetWakeEveryWaiter(mode == "wake-all")
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: n + 8})
	defer c.Close()
	co := prim.New(c, prim.WithLogger(slog.New(slog.DiscardHandler)))
	defer co.Close()
	stop := relay(co, lease, fence, n, nil)
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	return 0
}
