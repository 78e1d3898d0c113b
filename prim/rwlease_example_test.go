package prim_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

func ExampleCoordinator_TryAcquireReadLock() {
	ctx := context.Background()
	c := prim.New(exampleClient).WithPrefix("example-rw:")
	a, err := c.TryAcquireReadLock(ctx, "{account:42}:rw", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	// Read leases coexist; a write lease waits for all of them to end.
	b, err := c.TryAcquireReadLock(ctx, "{account:42}:rw", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	_, err = c.TryAcquireWriteLock(ctx, "{account:42}:rw", 30*time.Second)
	fmt.Println(errors.Is(err, prim.ErrNotAcquired))
	// Output: true
}

// Writers can starve: readers keep being admitted while any reader is live,
// and acquisition never queues. Retry the write lease with a bounded,
// doubling backoff and give up past a bound of your choosing.
func ExampleCoordinator_TryAcquireWriteLock() {
	ctx := context.Background()
	c := prim.New(exampleClient).WithPrefix("example-rw-writer:")
	reader, _ := c.TryAcquireReadLock(ctx, "{account:42}:rw", 30*time.Second)
	go func() {
		time.Sleep(100 * time.Millisecond)
		reader.Release(ctx) // the last reader leaves
	}()

	var write *prim.RWLease
	for delay := 50 * time.Millisecond; ; delay *= 2 {
		var err error
		write, err = c.TryAcquireWriteLock(ctx, "{account:42}:rw", 30*time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, prim.ErrNotAcquired) {
			fmt.Println(err) // input, server or uncertain outcome: not contention
			return
		}
		if delay > 2*time.Second {
			fmt.Println("write lease unavailable")
			return
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			fmt.Println(ctx.Err())
			return
		}
	}
	defer write.Close()
	// Exclusive work here, under write.Context(ctx).
	fmt.Println("exclusive")
	// Output: exclusive
}
