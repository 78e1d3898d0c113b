package testbed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWaitForCallerEnded: a wait the caller's context ends (a run ending
// 250ms into a failover's confirmation) says so, with how long it lasted and
// what it last saw, never "timed out after 30s"; one that outlives its own
// timeout still says it timed out.
func TestWaitForCallerEnded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := waitFor(ctx, 30*time.Second, "sentinels to agree on a new primary", func(context.Context) (bool, error) {
		return false, errors.New("s1 names port 1234")
	})
	if err == nil || strings.Contains(err.Error(), "timed out after 30s") || !strings.Contains(err.Error(), "the caller's context ended") ||
		!strings.Contains(err.Error(), "s1 names port 1234") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	err = waitFor(context.Background(), 50*time.Millisecond, "x", func(context.Context) (bool, error) { return false, nil })
	if err == nil || !strings.Contains(err.Error(), "timed out after 50ms waiting for x") {
		t.Fatalf("err = %v", err)
	}
}
