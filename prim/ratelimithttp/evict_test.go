package ratelimithttp

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// countingLimiter is a limiter that only counts how often the middleware
// looks at it: the test is of the middleware's own bookkeeping, which is
// pure logic (the limiters' semantics are tested on real servers).
type countingLimiter struct {
	looked *atomic.Int64
	closed atomic.Bool
}

func (l *countingLimiter) Allow(context.Context, int64) (prim.Decision, error) {
	return prim.Decision{Allowed: true, Limit: 1}, nil
}
func (l *countingLimiter) Wait(ctx context.Context, n int64) (prim.Decision, error) {
	return l.Allow(ctx, n)
}
func (l *countingLimiter) Stats() prim.LimiterStats { return prim.LimiterStats{} }
func (l *countingLimiter) IdleDuration() time.Duration {
	l.looked.Add(1)
	return time.Hour
}
func (l *countingLimiter) Close() error { l.closed.Store(true); return nil }

// TestEvictionIsO1: a flood of new keys (spoofed client addresses) on a full
// middleware must not make each request scan every limiter under the
// middleware's one mutex (issue 31, item 6): each new key evicts the limiter
// idle longest in amortised O(1), and an evicted limiter is closed.
func TestEvictionIsO1(t *testing.T) {
	const max = 2000
	var looked atomic.Int64
	var made []*countingLimiter
	m := New(func(string) (prim.RateLimiter, error) {
		l := &countingLimiter{looked: &looked}
		made = append(made, l)
		return l, nil
	}, KeyByIP, WithMaxLimiters(max), WithIdleTimeout(time.Hour))
	use := func(key string) {
		e, err := m.acquire(key)
		if err != nil {
			t.Fatal(err)
		}
		m.release(e)
	}
	for i := range max {
		use(fmt.Sprint("k", i))
	}
	looked.Store(0)
	const flood = 1000
	for i := range flood {
		use(fmt.Sprint("new", i))
	}
	if got := m.Limiters(); got != max {
		t.Fatalf("%d limiters after the flood, want the bound %d", got, max)
	}
	if n := looked.Load(); n > 4*flood {
		t.Fatalf("%d new keys on a full middleware looked at limiters %d times (%.0f per request): a scan of every limiter per request", flood, n, float64(n)/flood)
	}
	// The first limiters made (idle longest) went first, closed.
	for i := range flood {
		if !made[i].closed.Load() {
			t.Fatalf("limiter %d, among the idlest, was not evicted and closed", i)
		}
	}
	if made[flood].closed.Load() {
		t.Fatalf("limiter %d was evicted before idler ones", flood)
	}
	m.Close()
}
