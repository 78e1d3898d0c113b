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
