package prim

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim/internal/localserver"
)

// White-box tests of Wait's queue, Stats, IdleDuration and Close on real
// servers (localserver): no mocks. Time bounds are generous (shared, slow
// machines); each test waits for states it can observe rather than sleeping.

// queueLimiter makes a limiter of algo that grants one permit per period
// (fixed and sliding: limit 1 per period; bucket: 1 token, 1 per period).
func queueLimiter(t *testing.T, c *Coordinator, algo Algorithm, key string, period time.Duration, opts ...LimiterOption) *Limiter {
	return limiterOf(t, c, algo, key, 1, period, opts...)
}

// limiterOf makes a limiter of algo with limit permits per period (bucket:
// limit tokens, one more per period).
func limiterOf(t *testing.T, c *Coordinator, algo Algorithm, key string, limit int64, period time.Duration, opts ...LimiterOption) *Limiter {
	t.Helper()
	f := c.RateLimiters()
	var l *Limiter
	var err error
	switch algo {
	case AlgoFixedWindow:
		l, err = f.FixedWindow(key, limit, period, opts...)
	case AlgoSlidingWindow:
		l, err = f.SlidingWindow(key, limit, period, 2, opts...)
	case AlgoTokenBucket:
		l, err = f.TokenBucket(key, limit, 1, period, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// eventually waits (bounded) for cond.
func eventually(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exhaust takes the limiter's permits (one Wait that must be granted at once).
func exhaust(t *testing.T, l *Limiter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := l.Wait(ctx, l.Limit())
	if err != nil || !d.Allowed {
		t.Fatalf("first Wait: %+v, %v", d, err)
	}
}

type waitOutcome struct {
	name string
	d    Decision
	err  error
	at   time.Time
}

// enqueue starts Wait(ctx, n) in a goroutine and returns once its permits are
// queued (QueuedPermits grew by n).
func enqueue(t *testing.T, ctx context.Context, l *Limiter, name string, n int64, out chan<- waitOutcome) {
	t.Helper()
	before := l.Stats().QueuedPermits
	go func() {
		d, err := l.Wait(ctx, n)
		out <- waitOutcome{name, d, err, time.Now()}
	}()
	eventually(t, name+" queued", 10*time.Second, func() bool { return l.Stats().QueuedPermits == before+n })
}

func recvOutcome(t *testing.T, out <-chan waitOutcome, within time.Duration) waitOutcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(within):
		t.Fatalf("no Wait ended within %v", within)
	}
	return waitOutcome{}
}

// forEachServer runs f on a server of each build of the matrix (all of them
// when all, else the default build only).
func forEachServer(t *testing.T, all bool, f func(t *testing.T, c *Coordinator, admin *redis.Client)) {
	builds := localserver.Matrix()
	if !all {
		b := builds[0]
		if slices.Contains(builds, localserver.DefaultBuild) {
			b = localserver.DefaultBuild
		}
		builds = []string{b}
	}
	for _, b := range builds {
		t.Run(b, func(t *testing.T) {
			rc, admin := standalone(t, b, nil)
			f(t, New(rc), admin)
		})
	}
}

var queueAlgos = []Algorithm{AlgoFixedWindow, AlgoSlidingWindow, AlgoTokenBucket}

// TestWaitQueueOrder: three requests queued behind an exhausted limiter are
// granted one per period, in arrival order with OldestFirst and in reverse
// with NewestFirst; each only after the previous grant.
func TestWaitQueueOrder(t *testing.T) {
	forEachServer(t, true, func(t *testing.T, c *Coordinator, _ *redis.Client) {
		for _, algo := range queueAlgos {
			for _, order := range []QueueOrder{OldestFirst, NewestFirst} {
				t.Run(fmt.Sprintf("%s/%v", algo, order), func(t *testing.T) {
					period := 300 * time.Millisecond
					l := queueLimiter(t, c, algo, "order:"+string(algo)+order.String(), period, WithQueue(3, order))
					exhaust(t, l)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					out := make(chan waitOutcome, 3)
					for _, name := range []string{"A", "B", "C"} {
						enqueue(t, ctx, l, name, 1, out)
					}
					var got []string
					for range 3 {
						o := recvOutcome(t, out, 20*time.Second)
						if o.err != nil || !o.d.Allowed {
							t.Fatalf("%s: %+v, %v", o.name, o.d, o.err)
						}
						got = append(got, o.name)
					}
					want := []string{"A", "B", "C"}
					if order == NewestFirst {
						want = []string{"C", "B", "A"}
					}
					if !slices.Equal(got, want) {
						t.Fatalf("granted in order %v, want %v", got, want)
					}
					st := l.Stats()
					if st.Granted != 4 || st.Rejected != 0 || st.QueuedPermits != 0 {
						t.Fatalf("stats %+v, want 4 granted, 0 rejected, none queued", st)
					}
					eventually(t, "the queue's goroutine exits once the queue is empty", 5*time.Second, l.queueIdle)
				})
			}
		}
	})
}

// queueIdle reports that the queue's goroutine has exited.
func (l *Limiter) queueIdle() bool {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if l.st.q.serving {
		return false
	}
	if l.st.q.served != nil {
		select {
		case <-l.st.q.served:
		default:
			return false
		}
	}
	return true
}

// TestWaitQueueLimit: a refused request that does not fit the queue gets
// ErrQueueFull; with OldestFirst the newcomer, with NewestFirst the oldest
// queued one. A request larger than the queue and a queue limit of zero
// refuse at once.
func TestWaitQueueLimit(t *testing.T) {
	forEachServer(t, true, func(t *testing.T, c *Coordinator, _ *redis.Client) {
		for _, algo := range []Algorithm{AlgoFixedWindow, AlgoTokenBucket} {
			t.Run(string(algo)+"/oldest-first", func(t *testing.T) {
				l := queueLimiter(t, c, algo, "limit:old:"+string(algo), 5*time.Second, WithQueue(2, OldestFirst))
				exhaust(t, l)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out := make(chan waitOutcome, 3)
				enqueue(t, ctx, l, "A", 1, out)
				enqueue(t, ctx, l, "B", 1, out)
				start := time.Now()
				d, err := l.Wait(ctx, 1)
				if !errors.Is(err, ErrQueueFull) || d.Allowed || time.Since(start) > 2*time.Second {
					t.Fatalf("third request: %+v, %v after %v; want ErrQueueFull at once", d, err, time.Since(start))
				}
				if st := l.Stats(); st.QueuedPermits != 2 || st.Rejected != 1 {
					t.Fatalf("stats %+v, want 2 queued, 1 rejected", st)
				}
				l.Close()
				for range 2 {
					if o := recvOutcome(t, out, 5*time.Second); !errors.Is(o.err, ErrLimiterClosed) {
						t.Fatalf("%s after Close: %v", o.name, o.err)
					}
				}
			})
			t.Run(string(algo)+"/newest-first", func(t *testing.T) {
				l := limiterOf(t, c, algo, "limit:new:"+string(algo), 3, 5*time.Second, WithQueue(2, NewestFirst))
				exhaust(t, l)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out := make(chan waitOutcome, 4)
				enqueue(t, ctx, l, "A", 1, out)
				enqueue(t, ctx, l, "B", 1, out)
				// C pushes out A (the oldest) and takes its place.
				before := l.Stats().Rejected
				go func() {
					d, err := l.Wait(ctx, 1)
					out <- waitOutcome{"C", d, err, time.Now()}
				}()
				o := recvOutcome(t, out, 5*time.Second)
				if o.name != "A" || !errors.Is(o.err, ErrQueueFull) {
					t.Fatalf("pushed out: %s with %v; want A with ErrQueueFull", o.name, o.err)
				}
				eventually(t, "C queued in A's place", 5*time.Second, func() bool {
					st := l.Stats()
					return st.QueuedPermits == 2 && st.Rejected == before+1
				})
				// Two permits at once pushes out both B and C.
				go func() {
					d, err := l.Wait(ctx, 2)
					out <- waitOutcome{"D", d, err, time.Now()}
				}()
				var pushed []string
				for range 2 {
					o := recvOutcome(t, out, 5*time.Second)
					if !errors.Is(o.err, ErrQueueFull) {
						t.Fatalf("%s: %v, want ErrQueueFull", o.name, o.err)
					}
					pushed = append(pushed, o.name)
				}
				slices.Sort(pushed)
				if !slices.Equal(pushed, []string{"B", "C"}) {
					t.Fatalf("pushed out %v, want B and C", pushed)
				}
				if _, err := l.Wait(ctx, 3); !errors.Is(err, ErrQueueFull) {
					t.Fatalf("3 permits on a queue of 2: %v, want ErrQueueFull", err)
				}
				l.Close()
				if o := recvOutcome(t, out, 5*time.Second); o.name != "D" || !errors.Is(o.err, ErrLimiterClosed) {
					t.Fatalf("%s after Close: %v", o.name, o.err)
				}
			})
		}
		t.Run("no-queue", func(t *testing.T) {
			l := queueLimiter(t, c, AlgoFixedWindow, "limit:none", 5*time.Second, WithQueue(0, OldestFirst))
			exhaust(t, l)
			d, err := l.Wait(context.Background(), 1)
			if !errors.Is(err, ErrQueueFull) || d.Allowed || !d.HasRetryAfter || d.RetryAfter <= 0 || d.RetryAfter > 6*time.Second {
				t.Fatalf("Wait without a queue: %+v, %v; want the refusal with its RetryAfter and ErrQueueFull", d, err)
			}
			if st := l.Stats(); st.Rejected != 1 || st.Granted != 1 || st.QueuedPermits != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
		// n == 0 takes a queue slot too: without a queue it is refused at
		// once, and a queue of 1 holds one request of any n.
		t.Run("zero/no-queue", func(t *testing.T) {
			l := queueLimiter(t, c, AlgoFixedWindow, "limit:zero:none", 5*time.Second, WithQueue(0, OldestFirst))
			exhaust(t, l)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			d, err := l.Wait(ctx, 0)
			if !errors.Is(err, ErrQueueFull) || d.Allowed || time.Since(start) > 2*time.Second {
				t.Fatalf("Wait(0) without a queue: %+v, %v after %v; want ErrQueueFull at once", d, err, time.Since(start))
			}
		})
		t.Run("zero/queue-of-1", func(t *testing.T) {
			l := queueLimiter(t, c, AlgoFixedWindow, "limit:zero:one", 5*time.Second, WithQueue(1, OldestFirst))
			exhaust(t, l)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out := make(chan waitOutcome, 1)
			go func() {
				d, err := l.Wait(ctx, 0)
				out <- waitOutcome{"A", d, err, time.Now()}
			}()
			eventually(t, "A queued", 5*time.Second, func() bool {
				l.st.mu.Lock()
				defer l.st.mu.Unlock()
				return l.st.q.list.Len() == 1
			})
			for i := range 3 {
				for _, n := range []int64{0, 1} {
					start := time.Now()
					if d, err := l.Wait(ctx, n); !errors.Is(err, ErrQueueFull) || d.Allowed || time.Since(start) > 2*time.Second {
						t.Fatalf("Wait(%d) #%d on a full queue of 1: %+v, %v after %v; want ErrQueueFull at once", n, i, d, err, time.Since(start))
					}
				}
			}
			l.Close()
			if o := recvOutcome(t, out, 5*time.Second); !errors.Is(o.err, ErrLimiterClosed) {
				t.Fatalf("A after Close: %v", o.err)
			}
		})
		t.Run("arguments", func(t *testing.T) {
			l := queueLimiter(t, c, AlgoFixedWindow, "limit:args", 5*time.Second, WithQueue(10, OldestFirst))
			if _, err := l.Wait(context.Background(), -1); !errors.Is(err, ErrNegativePermits) || !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("negative n: %v", err)
			}
			start := time.Now()
			d, err := l.Wait(context.Background(), 2)
			if err != nil || d.Allowed || d.HasRetryAfter || time.Since(start) > 2*time.Second {
				t.Fatalf("n > limit: %+v, %v; want refused at once, no RetryAfter, no error", d, err)
			}
			if q := l.Stats().QueuedPermits; q != 0 {
				t.Fatalf("n > limit queued %d permits", q)
			}
		})
	})
}

// TestWaitCancel: a queued request whose context ends returns the context's
// error (errors.Is), leaves the queue at once, and the others keep waiting.
func TestWaitCancel(t *testing.T) {
	forEachServer(t, true, func(t *testing.T, c *Coordinator, _ *redis.Client) {
		for _, algo := range []Algorithm{AlgoFixedWindow, AlgoTokenBucket} {
			t.Run(string(algo), func(t *testing.T) {
				l := queueLimiter(t, c, algo, "cancel:"+string(algo), 2*time.Second, WithQueue(5, OldestFirst))
				exhaust(t, l)
				bg, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancelAll()
				out := make(chan waitOutcome, 3)
				ctxA, cancelA := context.WithCancel(bg)
				enqueue(t, ctxA, l, "A", 1, out)
				ctxB, cancelB := context.WithTimeout(bg, 300*time.Millisecond)
				defer cancelB()
				enqueue(t, ctxB, l, "B", 2-1, out)
				enqueue(t, bg, l, "C", 1, out)
				start := time.Now()
				cancelA()
				o := recvOutcome(t, out, 5*time.Second)
				if o.name != "A" || !errors.Is(o.err, context.Canceled) || errors.Is(o.err, ErrLimiterClosed) || time.Since(start) > time.Second {
					t.Fatalf("cancelled: %s %v after %v", o.name, o.err, time.Since(start))
				}
				o = recvOutcome(t, out, 5*time.Second)
				if o.name != "B" || !errors.Is(o.err, context.DeadlineExceeded) {
					t.Fatalf("deadline: %s %v", o.name, o.err)
				}
				if q := l.Stats().QueuedPermits; q != 1 {
					t.Fatalf("QueuedPermits %d after two left, want 1", q)
				}
				o = recvOutcome(t, out, 10*time.Second)
				if o.name != "C" || o.err != nil || !o.d.Allowed {
					t.Fatalf("C: %+v %v", o.d, o.err)
				}
				if st := l.Stats(); st.Granted != 2 || st.Rejected != 0 || st.QueuedPermits != 0 {
					t.Fatalf("stats %+v: cancelled requests count in neither", st)
				}
				// A context that ended before Wait: not queued.
				dead, cancelDead := context.WithCancel(bg)
				cancelDead()
				if _, err := l.Wait(dead, 1); !errors.Is(err, context.Canceled) {
					t.Fatalf("dead context: %v", err)
				}
				if q := l.Stats().QueuedPermits; q != 0 {
					t.Fatalf("dead context queued %d", q)
				}
			})
		}
	})
}

// TestWaitClose: Close releases queued requests promptly with
// ErrLimiterClosed (not a context error), stops the queue's goroutine, makes
// later calls fail, and is idempotent.
func TestWaitClose(t *testing.T) {
	forEachServer(t, true, func(t *testing.T, c *Coordinator, _ *redis.Client) {
		for _, algo := range []Algorithm{AlgoFixedWindow, AlgoTokenBucket} {
			t.Run(string(algo), func(t *testing.T) {
				l := queueLimiter(t, c, algo, "close:"+string(algo), 10*time.Second, WithQueue(5, OldestFirst))
				exhaust(t, l)
				goroutines := runtime.NumGoroutine()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out := make(chan waitOutcome, 2)
				enqueue(t, ctx, l, "A", 1, out)
				enqueue(t, ctx, l, "B", 1, out)
				start := time.Now()
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					o := recvOutcome(t, out, 5*time.Second)
					if !errors.Is(o.err, ErrLimiterClosed) || errors.Is(o.err, context.Canceled) || o.d.Allowed {
						t.Fatalf("%s: %+v %v", o.name, o.d, o.err)
					}
				}
				if el := time.Since(start); el > 2*time.Second {
					t.Fatalf("Close released the queue after %v", el)
				}
				if !l.queueIdle() {
					t.Fatal("the queue's goroutine still runs after Close returned")
				}
				// The waiters' goroutines and the queue's are gone: no more
				// goroutines than before the requests were queued.
				eventually(t, "goroutines back to their count before the queue", 5*time.Second,
					func() bool { return runtime.NumGoroutine() <= goroutines })
				if _, err := l.Wait(ctx, 1); !errors.Is(err, ErrLimiterClosed) {
					t.Fatalf("Wait after Close: %v", err)
				}
				if _, err := l.Allow(ctx, 1); !errors.Is(err, ErrLimiterClosed) {
					t.Fatalf("Allow after Close: %v", err)
				}
				if err := l.Close(); err != nil {
					t.Fatalf("second Close: %v", err)
				}
				if st := l.Stats(); st.QueuedPermits != 0 || st.Granted != 1 || st.Rejected != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	})
}

// decisionCounter counts the scripts a client sends (EVAL, EVALSHA and their
// read-only forms) and INCREX, i.e. the limiter's decisions.
type decisionCounter struct{ n atomic.Int64 }

func (c *decisionCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *decisionCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch strings.ToLower(cmd.Name()) {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "increx", "fcall":
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *decisionCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			switch strings.ToLower(cmd.Name()) {
			case "eval", "evalsha", "eval_ro", "evalsha_ro", "increx", "fcall":
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestWaitDoesNotPoll: a request queued for a 2s window makes a handful of
// decisions (the refusal, then one at the server-computed availability), not a
// number proportional to the wait; IdleDuration is zero meanwhile.
func TestWaitDoesNotPoll(t *testing.T) {
	for _, b := range localserver.Matrix()[:1] {
		t.Run(b, func(t *testing.T) {
			rc, _ := standalone(t, b, nil)
			ctr := &decisionCounter{}
			rc.AddHook(ctr)
			c := New(rc)
			for _, algo := range []Algorithm{AlgoFixedWindow, AlgoTokenBucket} {
				t.Run(string(algo), func(t *testing.T) {
					window := 2 * time.Second
					l := queueLimiter(t, c, algo, "poll:"+string(algo), window, WithQueue(1, OldestFirst))
					exhaust(t, l)
					before := ctr.n.Load()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					start := time.Now()
					done := make(chan waitOutcome, 1)
					go func() {
						d, err := l.Wait(ctx, 1)
						done <- waitOutcome{"W", d, err, time.Now()}
					}()
					eventually(t, "queued", 5*time.Second, func() bool { return l.Stats().QueuedPermits == 1 })
					if idle := l.IdleDuration(); idle != 0 {
						t.Fatalf("IdleDuration %v while a request is queued", idle)
					}
					o := recvOutcome(t, done, 20*time.Second)
					if o.err != nil || !o.d.Allowed {
						t.Fatalf("queued Wait: %+v %v", o.d, o.err)
					}
					waited := o.at.Sub(start)
					if waited < window/2 {
						t.Fatalf("granted after %v, before the window could end", waited)
					}
					// A 10ms poll would make ~200 decisions; one per
					// availability makes 2 (a script load retry at most adds
					// one each).
					if n := ctr.n.Load() - before; n > 5 {
						t.Fatalf("%d decisions while one request waited %v: polling", n, waited)
					}
					eventually(t, "the queue's goroutine exits", 5*time.Second, l.queueIdle)
				})
			}
		})
	}
}

// TestLimiterStatsIdle: Stats counts granted and refused requests, queued
// permits and the latest available count; IdleDuration grows without use and
// is zero while a request waits.
func TestLimiterStatsIdle(t *testing.T) {
	forEachServer(t, false, func(t *testing.T, c *Coordinator, admin *redis.Client) {
		l, err := c.RateLimiters().FixedWindow("stats", 3, 5*time.Second, WithQueue(2, OldestFirst))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if st := l.Stats(); st != (LimiterStats{Available: -1}) {
			t.Fatalf("fresh stats %+v", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if d, err := l.Wait(ctx, 2); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("Wait 2 of 3: %+v %v", d, err)
		}
		if st := l.Stats(); st.Granted != 1 || st.Available != 1 || st.Rejected != 0 {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(60 * time.Millisecond)
		if idle := l.IdleDuration(); idle < 50*time.Millisecond || idle > 10*time.Second {
			t.Fatalf("IdleDuration %v after 60ms without use", idle)
		}
		out := make(chan waitOutcome, 1)
		wctx, wcancel := context.WithCancel(ctx)
		enqueue(t, wctx, l, "A", 2, out)
		if st := l.Stats(); st.QueuedPermits != 2 || st.Available != 1 {
			t.Fatalf("stats with 2 queued %+v", st)
		}
		if idle := l.IdleDuration(); idle != 0 {
			t.Fatalf("IdleDuration %v while queued", idle)
		}
		if _, err := l.Wait(ctx, 1); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("queue full: %v", err)
		}
		wcancel()
		recvOutcome(t, out, 5*time.Second)
		st := l.Stats()
		if st.Granted != 1 || st.Rejected != 1 || st.QueuedPermits != 0 {
			t.Fatalf("final stats %+v", st)
		}
		if idle := l.IdleDuration(); idle > time.Second {
			t.Fatalf("IdleDuration %v right after the queue emptied", idle)
		}

		// An Allow in flight (the server paused) is use too. The pause
		// (2s) outlasts the 200ms look by what a stall on a loaded machine
		// could add (it was 700ms).
		time.Sleep(60 * time.Millisecond)
		if err := admin.Do(ctx, "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		allowed := make(chan error, 1)
		go func() {
			_, err := l.Allow(ctx, 0)
			allowed <- err
		}()
		time.Sleep(200 * time.Millisecond)
		select {
		case err := <-allowed:
			t.Fatalf("Allow returned during CLIENT PAUSE (%v): nothing to observe", err)
		default:
		}
		if idle := l.IdleDuration(); idle != 0 {
			t.Fatalf("IdleDuration %v while Allow is in flight", idle)
		}
		if err := <-allowed; err != nil {
			t.Fatal(err)
		}
		if idle := l.IdleDuration(); idle > time.Second {
			t.Fatalf("IdleDuration %v right after Allow", idle)
		}
	})
}

// TestWaitConcurrentQueue: many goroutines Wait on one limiter through its
// queue; every one ends granted, the grants never exceed the limit per window
// by much (server time; checked loosely), and the queue ends empty.
func TestWaitConcurrentQueue(t *testing.T) {
	forEachServer(t, false, func(t *testing.T, c *Coordinator, _ *redis.Client) {
		l, err := c.RateLimiters().FixedWindow("many", 4, 200*time.Millisecond, WithQueue(100, OldestFirst))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var granted atomic.Int64
		for range 16 {
			wg.Go(func() {
				if d, err := l.Wait(ctx, 1); err == nil && d.Allowed {
					granted.Add(1)
				} else {
					t.Errorf("Wait: %+v %v", d, err)
				}
			})
		}
		wg.Wait()
		if granted.Load() != 16 {
			t.Fatalf("%d of 16 granted", granted.Load())
		}
		if st := l.Stats(); st.Granted != 16 || st.QueuedPermits != 0 {
			t.Fatalf("stats %+v", st)
		}
		eventually(t, "the queue's goroutine exits", 5*time.Second, l.queueIdle)
	})
}

// TestWaitZero: Wait for zero permits on an exhausted limiter waits (queued,
// no polling) until a permit is available and consumes none.
func TestWaitZero(t *testing.T) {
	forEachServer(t, false, func(t *testing.T, c *Coordinator, _ *redis.Client) {
		for _, algo := range []Algorithm{AlgoFixedWindow, AlgoTokenBucket} {
			t.Run(string(algo), func(t *testing.T) {
				period := time.Second
				l := queueLimiter(t, c, algo, "zero:"+string(algo), period, WithQueue(1, OldestFirst))
				exhaust(t, l)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				start := time.Now()
				d, err := l.Wait(ctx, 0)
				if err != nil || !d.Allowed || d.Remaining < 1 {
					t.Fatalf("Wait(0): %+v %v", d, err)
				}
				if el := time.Since(start); el < period/2 {
					t.Fatalf("Wait(0) on an exhausted limiter returned after %v", el)
				}
				if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
					t.Fatalf("Wait(0) consumed the permit: Allow(1) %+v %v", d, err)
				}
			})
		}
	})
}

// TestWaitEndsOnPermanentErrors: a queued Wait ends promptly with the error
// its doc names when the limiter's key turns into another type (ErrWrongType,
// which the scripts report as {-1,'wrongtype'}) or its ACL user loses a
// command the script needs (ErrNoPermission, "ERR ACL failure in script" on
// Redis 7+): retrying cures neither.
func TestWaitEndsOnPermanentErrors(t *testing.T) {
	forEachServer(t, false, func(t *testing.T, c *Coordinator, admin *redis.Client) {
		for _, algo := range queueAlgos {
			t.Run("wrongtype/"+string(algo), func(t *testing.T) {
				l := queueLimiter(t, c, algo, "perm:wt:"+string(algo), 300*time.Millisecond, WithQueue(1, OldestFirst))
				exhaust(t, l)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out := make(chan waitOutcome, 1)
				enqueue(t, ctx, l, "A", 1, out)
				if err := admin.Del(ctx, l.Key()).Err(); err != nil {
					t.Fatal(err)
				}
				if err := admin.LPush(ctx, l.Key(), "x").Err(); err != nil {
					t.Fatal(err)
				}
				if o := recvOutcome(t, out, 5*time.Second); !errors.Is(o.err, ErrWrongType) || o.d.Allowed {
					t.Fatalf("queued Wait on a list: %+v, %v; want ErrWrongType", o.d, o.err)
				}
			})
		}
		t.Run("acl/bucket", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			user := "nohset"
			if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
				t.Fatal(err)
			}
			uc := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: user, Password: "pw"})
			t.Cleanup(func() { uc.Close() })
			l := queueLimiter(t, New(uc), AlgoTokenBucket, "perm:acl", 300*time.Millisecond, WithQueue(1, OldestFirst))
			exhaust(t, l)
			out := make(chan waitOutcome, 1)
			enqueue(t, ctx, l, "A", 1, out)
			if err := admin.Do(ctx, "ACL", "SETUSER", user, "-hset").Err(); err != nil {
				t.Fatal(err)
			}
			if o := recvOutcome(t, out, 5*time.Second); !errors.Is(o.err, ErrNoPermission) || o.d.Allowed {
				t.Fatalf("queued Wait refused by ACL: %+v, %v; want ErrNoPermission", o.d, o.err)
			}
		})
	})
}

// TestWaitInFlightIsUncertain: a queued request whose decision is in flight
// when its context ends (the server paused) may have been granted: Wait's
// error matches ErrUncertain as well as the context's, so a caller (and the
// harness's history) can tell it from a request that was still only waiting,
// which matches the context's error alone.
func TestWaitInFlightIsUncertain(t *testing.T) {
	forEachServer(t, false, func(t *testing.T, c *Coordinator, admin *redis.Client) {
		// A 2s window (it was 400ms): the 100ms wait below must end before
		// the window does, and the pause must come before the queue's retry
		// at the window's end, however slowly a loaded machine runs the
		// calls between.
		const window = 2 * time.Second
		l := queueLimiter(t, c, AlgoFixedWindow, "inflight", window, WithQueue(5, OldestFirst))
		exhaust(t, l)
		bg, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancelAll()
		// Waiting only: not in flight.
		short, cancelShort := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancelShort()
		if _, err := l.Wait(short, 1); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUncertain) {
			t.Fatalf("a request only waiting: %v, want the deadline alone", err)
		}
		exhaust2 := func() {
			for {
				d, err := l.Allow(bg, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					return
				}
			}
		}
		exhaust2()
		out := make(chan waitOutcome, 1)
		ctx, cancel := context.WithTimeout(bg, 2*window)
		defer cancel()
		enqueue(t, ctx, l, "A", 1, out)
		// Pause the server before the queue's retry (at the window's end) is
		// answered: that decision is in flight when ctx ends.
		if err := admin.Do(bg, "CLIENT", "PAUSE", fmt.Sprint((4 * window).Milliseconds()), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		defer admin.Do(context.Background(), "CLIENT", "UNPAUSE")
		o := recvOutcome(t, out, 5*window)
		if !errors.Is(o.err, context.DeadlineExceeded) || !errors.Is(o.err, ErrUncertain) {
			t.Fatalf("a request whose decision was in flight: %v, want ErrUncertain and the deadline", o.err)
		}
	})
}
