package servertest_test

import (
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// ---- rate limiters: the decisions of the three algorithms ---------------------

// limiterKind makes one algorithm's limiter of limit permits per window (the
// bucket: limit tokens, refilled limit per window).
type limiterKind struct {
	name string
	make func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error)
}

var limiterKinds = []limiterKind{
	{"fixed", func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error) {
		return f.FixedWindow(key, limit, window)
	}},
	{"sliding", func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error) {
		return f.SlidingWindow(key, limit, window, 10)
	}},
	{"bucket", func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error) {
		return f.TokenBucket(key, limit, limit, window)
	}},
}

// forEachLimiter runs f for each algorithm on every build.
func forEachLimiter(t *testing.T, f func(t *testing.T, e *env, k limiterKind)) {
	forEachBuild(t, func(t *testing.T, e *env) {
		for _, k := range limiterKinds {
			t.Run(k.name, func(t *testing.T) { f(t, e, k) })
		}
	})
}

func mustLimiter(t *testing.T, k limiterKind, f *prim.RateLimiters, key string, limit int64, window time.Duration) *prim.Limiter {
	t.Helper()
	l, err := k.make(f, key, limit, window)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The basic sequence: limit grants, then a refusal with a RetryAfter within
// the window, Remaining counting down; n == 0 reports without consuming.
func TestRateLimitSequence(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		key := e.k(k.name + ":lim")
		l := mustLimiter(t, k, prim.New(c).RateLimiters(), key, 5, 10*time.Second)
		d, err := l.Allow(ctx, 0)
		if err != nil || !d.Allowed || d.Remaining != 5 || d.HasRetryAfter {
			t.Fatalf("n == 0 on a fresh key: %+v, %v", d, err)
		}
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatal("n == 0 created the key")
		}
		for i := int64(1); i <= 5; i++ {
			d, err := l.Allow(ctx, 1)
			if err != nil || !d.Allowed || d.Remaining != 5-i || d.Limit != 5 {
				t.Fatalf("grant %d: %+v, %v", i, d, err)
			}
			if d.Reset <= 0 || d.Reset > 11*time.Second { // sliding: up to a segment more
				t.Fatalf("grant %d: Reset %v", i, d.Reset)
			}
		}
		before := snapshot(ctx, e.admin, key)
		for _, n := range []int64{1, 0} {
			d, err = l.Allow(ctx, n)
			if err != nil || d.Allowed || d.Remaining != 0 || !d.HasRetryAfter || d.RetryAfter <= 0 || d.RetryAfter > 11*time.Second+time.Millisecond {
				t.Fatalf("n=%d past the limit: %+v, %v", n, d, err)
			}
		}
		if after := snapshot(ctx, e.admin, key); after != before {
			t.Fatalf("a refusal changed the state:\n%s\n%s", before, after)
		}
		if s := l.Stats(); s.Granted != 6 || s.Rejected != 2 || s.Available != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}
