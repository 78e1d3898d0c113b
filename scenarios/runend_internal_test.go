package scenarios

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRunEndReadsAsDeadline: the run's end reads as a deadline to the
// clients and to every context they derive (a waiting acquisition's
// WithTimeout), and Deadline is the nominal end; an interruption from
// outside reads as the parent's error. With a plain WithCancel (the first
// form of the run's wait for its schedule) a child read context.Canceled and
// the waiting-lock workload recorded its cut wait as an error instead of
// "nothing happened": mutant-waiter-ignores-deadline went unflagged.
func TestRunEndReadsAsDeadline(t *testing.T) {
	end := time.Now().Add(time.Hour)
	c := newRunEnd(context.Background(), end)
	if d, ok := c.Deadline(); !ok || !d.Equal(end) {
		t.Errorf("Deadline %v %v, want %v", d, ok, end)
	}
	child, cancel := context.WithTimeout(c, time.Hour)
	defer cancel()
	c.stop(context.DeadlineExceeded)
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the child did not end with the run")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Errorf("run %v, child %v: want context.DeadlineExceeded for both", c.Err(), child.Err())
	}

	parent, interrupt := context.WithCancel(context.Background())
	c = newRunEnd(parent, end)
	interrupt()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end with its parent")
	}
	c.stop(context.DeadlineExceeded) // too late: the interruption stands
	if !errors.Is(c.Err(), context.Canceled) {
		t.Errorf("interrupted run: %v, want context.Canceled", c.Err())
	}
}
