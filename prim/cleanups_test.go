package prim

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A late settlement (boundedOn's, when the caller's context ends first) is a
// background clean-up WaitCleanups waits for: a wait shorter than it ends
// with the context's error, a wait after it returns nil; a zero Coordinator
// has none. No server: the tracking is pure Go.
func TestBoundedLateTracked(t *testing.T) {
	c := &Coordinator{bg: &cleanups{}}
	release := make(chan struct{})
	settled := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := boundedOn(c.bg, ctx, func(context.Context) int { <-release; return 1 }, func(int) { close(settled) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("boundedOn: %v, want the deadline", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := c.WaitCleanups(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitCleanups while the settlement waits: %v, want a deadline error", err)
	}
	close(release)
	long, cancelLong := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelLong()
	if err := c.WaitCleanups(long); err != nil {
		t.Fatalf("WaitCleanups after the settlement: %v", err)
	}
	select {
	case <-settled:
	default:
		t.Fatal("WaitCleanups returned before the late settlement ran")
	}
	if err := (&Coordinator{}).WaitCleanups(context.Background()); err != nil {
		t.Fatalf("a zero Coordinator: %v", err)
	}
	// goCleanup counts too, and many at once balance.
	for range 100 {
		c.goCleanup(func() { time.Sleep(time.Millisecond) })
	}
	if err := c.WaitCleanups(long); err != nil {
		t.Fatalf("after 100 clean-ups: %v", err)
	}
}

// A permit's background clean-up gives up at once on an ACL refusal (a user
// without CLIENT KILL, or without the release script's commands): the
// refusal will not go away within the window, where a failure of the
// network might. Other errors are retried until the window ends. No server.
func TestRetryCleanupStopsAtRefusal(t *testing.T) {
	c := &Coordinator{window: time.Minute, bg: &cleanups{}}
	calls := 0
	start := time.Now()
	err := c.retryCleanup(func(context.Context) error {
		calls++
		return serverError(replyErr("NOPERM User app has no permissions to run the 'client|kill' command"))
	})
	if !errors.Is(err, ErrNoPermission) || calls != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("after a NOPERM refusal: %v, %d calls in %v; want ErrNoPermission after one call", err, calls, time.Since(start))
	}
	c.window = 300 * time.Millisecond
	calls = 0
	err = c.retryCleanup(func(context.Context) error { calls++; return context.DeadlineExceeded })
	if !errors.Is(err, context.DeadlineExceeded) || calls < 2 {
		t.Fatalf("a timeout: %v after %d calls; want retries until the window ends", err, calls)
	}
}
