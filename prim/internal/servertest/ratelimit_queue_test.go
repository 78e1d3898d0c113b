package servertest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestWaitRidesOutRefusedLink: a request queued on a limiter whose server
// becomes unreachable keeps waiting; its decisions fail and the queue backs off
// (capped exponential, not a tight loop: a handful of attempts in the outage),
// and it is granted soon after the link heals.
func TestWaitRidesOutRefusedLink(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		// Not the defaults, on purpose: the test counts the queue's attempts
		// during the outage, and with MaxRetries 3 each attempt is up to four
		// sends (prim resends a script itself, per the client's policy), which
		// blurs "a handful of attempts" against "a tight loop"; the short
		// timeouts keep the outage's attempts within the test's minute. The
		// default path of a failing decision is TestRateLimitUncertain's.
		c, ctr := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) {
			o.MaxRetries = -1
			o.DialTimeout = 300 * time.Millisecond
			o.ReadTimeout = 300 * time.Millisecond
		}))
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		for _, algo := range []prim.Algorithm{prim.AlgoFixedWindow, prim.AlgoTokenBucket} {
			t.Run(string(algo), func(t *testing.T) {
				rl := prim.New(c).RateLimiters()
				period := 500 * time.Millisecond
				var l *prim.Limiter
				if algo == prim.AlgoFixedWindow {
					l, err = rl.FixedWindow(e.k("refused:"+string(algo)), 1, period, prim.WithQueue(1, prim.OldestFirst))
				} else {
					l, err = rl.TokenBucket(e.k("refused:"+string(algo)), 1, 1, period, prim.WithQueue(1, prim.OldestFirst))
				}
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
					t.Fatalf("first: %+v %v", d, err)
				}
				type res struct {
					d   prim.Decision
					err error
				}
				done := make(chan res, 1)
				go func() {
					d, err := l.Wait(ctx, 1)
					done <- res{d, err}
				}()
				deadline := time.Now().Add(5 * time.Second)
				for l.Stats().QueuedPermits != 1 {
					if time.Now().After(deadline) {
						t.Fatal("never queued")
					}
					time.Sleep(5 * time.Millisecond)
				}
				if err := link.Refuse(); err != nil {
					t.Fatal(err)
				}
				before := ctr.n.Load()
				outage := 2 * time.Second
				time.Sleep(outage)
				select {
				case r := <-done:
					t.Fatalf("Wait ended during the outage: %+v %v", r.d, r.err)
				default:
				}
				attempts := ctr.n.Load() - before
				t.Logf("%d commands during the %v outage", attempts, outage)
				if err := link.Heal(); err != nil {
					t.Fatal(err)
				}
				// Backoff from 10ms doubling to 1s: about 8 attempts in 2s
				// (each may count a dial's handshake commands too); a tight
				// loop would make hundreds.
				if attempts > 60 {
					t.Fatalf("%d commands in a %v outage: no backoff", attempts, outage)
				}
				select {
				case r := <-done:
					if r.err != nil || !r.d.Allowed {
						t.Fatalf("after heal: %+v %v", r.d, r.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("not granted within 10s of the heal")
				}
			})
		}
	})
}

// defaultLimiter makes a limiter of algo granting one permit per period
// (bucket: one token, one more per period), with opts and nothing else.
func defaultLimiter(t *testing.T, rl *prim.RateLimiters, algo prim.Algorithm, key string, limit int64, period time.Duration, opts ...prim.LimiterOption) *prim.Limiter {
	t.Helper()
	var l *prim.Limiter
	var err error
	switch algo {
	case prim.AlgoFixedWindow:
		l, err = rl.FixedWindow(key, limit, period, opts...)
	case prim.AlgoSlidingWindow:
		l, err = rl.SlidingWindow(key, limit, period, 2, opts...)
	case prim.AlgoTokenBucket:
		l, err = rl.TokenBucket(key, limit, 1, period, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestWaitQueuesByDefault (issue 32, item 7): a limiter made without
// WithQueue waits in Wait, as x/time/rate's Wait does, the README and the
// RateLimiter interface say: with its permits taken, Wait is granted when one
// frees within the caller's context, not refused. Its queue holds the
// limiter's limit in permits, oldest first: a request beyond that is refused
// at once with ErrQueueFull and pushes out no one. WithQueue(0, …) keeps the
// reference's no-queue behaviour: the refusal at once, with its RetryAfter and
// ErrQueueFull. go-redis's default client options throughout.
//
// Time bounds: a permit frees 2s after it was taken (the sliding window's up
// to one 1s segment later); 30s (the caller's context) is a wait any user
// would call hung. "At once" is within 10s on a one-minute window: a refusal
// that waited for the window would take a minute.
func TestWaitQueuesByDefault(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		c, _ := e.client(t)
		rl := prim.New(c).RateLimiters()
		for _, algo := range []prim.Algorithm{prim.AlgoFixedWindow, prim.AlgoSlidingWindow, prim.AlgoTokenBucket} {
			t.Run("waits/"+string(algo), func(t *testing.T) {
				ctx := ctxT(t, 30*time.Second)
				l := defaultLimiter(t, rl, algo, e.k("waits:"+string(algo)), 1, 2*time.Second)
				if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
					t.Fatalf("first: %+v %v", d, err)
				}
				start := time.Now()
				d, err := l.Wait(ctx, 1)
				if err != nil || !d.Allowed {
					t.Fatalf("Wait on a default limiter with its permit taken: %+v, %v after %v; want granted when the permit frees (2s)", d, err, time.Since(start))
				}
				if st := l.Stats(); st.Granted != 2 || st.Rejected != 0 || st.QueuedPermits != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
		t.Run("queue-holds-the-limit", func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			l := defaultLimiter(t, rl, prim.AlgoFixedWindow, e.k("bound"), 2, time.Minute)
			if d, err := l.Allow(ctx, 2); err != nil || !d.Allowed {
				t.Fatalf("first: %+v %v", d, err)
			}
			errs := make(chan error, 2)
			for range 2 {
				go func() {
					_, err := l.Wait(ctx, 1)
					errs <- err
				}()
			}
			deadline := time.Now().Add(10 * time.Second)
			for l.Stats().QueuedPermits != 2 {
				if time.Now().After(deadline) {
					t.Fatalf("two Wait(1) not queued within 10s on a default limiter of limit 2: %+v", l.Stats())
				}
				time.Sleep(5 * time.Millisecond)
			}
			start := time.Now()
			d, err := l.Wait(ctx, 1)
			if !errors.Is(err, prim.ErrQueueFull) || d.Allowed || time.Since(start) > 10*time.Second {
				t.Fatalf("a third Wait(1) beyond the default queue (the limit, 2): %+v, %v after %v; want ErrQueueFull at once", d, err, time.Since(start))
			}
			if st := l.Stats(); st.QueuedPermits != 2 || st.Rejected != 1 {
				t.Fatalf("the refusal pushed out a queued request (default order is oldest first): %+v", st)
			}
			l.Close()
			for range 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, prim.ErrLimiterClosed) {
						t.Fatalf("queued Wait after Close: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a queued Wait did not end within 10s of Close")
				}
			}
		})
		for _, algo := range []prim.Algorithm{prim.AlgoFixedWindow, prim.AlgoSlidingWindow, prim.AlgoTokenBucket} {
			t.Run("no-queue/"+string(algo), func(t *testing.T) {
				ctx := ctxT(t, 30*time.Second)
				l := defaultLimiter(t, rl, algo, e.k("none:"+string(algo)), 1, time.Minute, prim.WithQueue(0, prim.OldestFirst))
				if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
					t.Fatalf("first: %+v %v", d, err)
				}
				start := time.Now()
				d, err := l.Wait(ctx, 1)
				if !errors.Is(err, prim.ErrQueueFull) || d.Allowed || !d.HasRetryAfter || d.RetryAfter <= 0 || time.Since(start) > 10*time.Second {
					t.Fatalf("Wait with WithQueue(0, …): %+v, %v after %v; want the refusal at once, with its RetryAfter, and ErrQueueFull", d, err, time.Since(start))
				}
				if st := l.Stats(); st.Granted != 1 || st.Rejected != 1 || st.QueuedPermits != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	})
}
