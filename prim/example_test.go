package prim_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// exampleClient is the client the examples use; a test points it at a real
// server (see TestMain) before the examples run.
var exampleClient redis.UniversalClient

func ExampleCoordinator_TryAcquireFencedLock() {
	ctx := context.Background()
	c := prim.New(exampleClient)
	lock, err := c.TryAcquireFencedLock(ctx, "{invoice:42}:lease", "{invoice:42}:fence", 30*time.Second)
	if errors.Is(err, prim.ErrNotAcquired) {
		fmt.Println("someone else holds it")
		return
	}
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer lock.Close()
	fmt.Println("token", lock.FencingToken())
	res, _ := lock.Release(ctx)
	fmt.Println(res)
	// Output:
	// token 1
	// Released
}

func ExampleFencedRecord() {
	var record prim.FencedRecord
	fmt.Println(record.TryWrite(12, "new owner"))
	fmt.Println(record.TryWrite(12, "new owner, second write"))
	fmt.Println(record.TryWrite(11, "stale owner"))
	v, tok := record.Value()
	fmt.Println(v, tok)
	// Output:
	// true
	// true
	// false
	// new owner, second write 12
}

func ExampleFencedLock_Renew() {
	ctx := context.Background()
	c := prim.New(exampleClient).WithPrefix("example-renew:")
	lock, err := c.TryAcquireFencedLock(ctx, "{job}:lease", "{job}:fence", 2*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Close()
	ok, err := lock.Renew(ctx, 10*time.Second)
	fmt.Println(ok, err, lock.RemainingEstimate() > 5*time.Second)
	// Output: true <nil> true
}

func ExampleCoordinator_AcquireFencedLock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := prim.New(exampleClient).WithPrefix("example-wait:")
	defer c.Close() // stops the invalidation watchers; the client stays open
	holder, _ := c.TryAcquireFencedLock(ctx, "{job}:lease", "{job}:fence", 10*time.Second)
	go func() {
		time.Sleep(50 * time.Millisecond)
		holder.Release(ctx)
	}()
	// Sleeps until the holder's release invalidates the lease key.
	lock, err := c.AcquireFencedLock(ctx, "{job}:lease", "{job}:fence", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Close()
	fmt.Println("token", lock.FencingToken())
	// Output: token 2
}

func ExampleCoordinator_TryAcquireLease() {
	ctx := context.Background()
	c := prim.New(exampleClient).WithPrefix("example-lease:")
	lease, err := c.TryAcquireLease(ctx, "workers", "worker:42", 30*time.Second)
	if errors.Is(err, prim.ErrFeatureUnsupported) {
		fmt.Println("needs Redis 7.4+ or Valkey 9+")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Close()
	fmt.Println(lease.Field())
	// Output: worker:42
}

// Protected work runs under the lock's Context: it is cancelled the moment
// ownership ends (the local estimate runs out without a renewal, the lease is
// lost, a renewal becomes uncertain, or the lock is released).
func ExampleFencedLock_Context() {
	ctx := context.Background()
	c := prim.New(exampleClient).WithPrefix("example-context:")
	lock, err := c.TryAcquireFencedLock(ctx, "{job}:lease", "{job}:fence", 200*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Close()
	work, stop := lock.Context(ctx)
	defer stop()
	fmt.Println(lock.State())
	// No renewal: the work must stop by the lease's estimated end.
	<-work.Done()
	fmt.Println(context.Cause(work) == prim.ErrOwnershipEnded, lock.State())
	// Output:
	// held
	// true estimate-ended
}

func ExampleRateLimiters_FixedWindow() {
	ctx := context.Background()
	limits := prim.New(exampleClient).WithPrefix("example-fixed:").RateLimiters()
	lim, err := limits.FixedWindow("limits:api", 2, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		d, err := lim.Allow(ctx, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		if !d.Allowed {
			fmt.Println("refused; retry within a minute:", d.HasRetryAfter && d.RetryAfter <= time.Minute+time.Millisecond)
			continue
		}
		fmt.Println("granted, remaining", d.Remaining)
	}
	// Output:
	// granted, remaining 1
	// granted, remaining 0
	// refused; retry within a minute: true
}

func ExampleRateLimiters_SlidingWindow() {
	ctx := context.Background()
	limits := prim.New(exampleClient).WithPrefix("example-sliding:").RateLimiters()
	lim, err := limits.SlidingWindow("limits:api", 5, time.Minute, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := lim.Allow(ctx, 3)
	fmt.Println(d.Allowed, d.Remaining, err)
	d, err = lim.Allow(ctx, 3) // only 2 left in the window
	fmt.Println(d.Allowed, d.Remaining, d.HasRetryAfter, err)
	d, err = lim.Allow(ctx, 6) // more than the limit: never possible
	fmt.Println(d.Allowed, d.HasRetryAfter, err)
	// Output:
	// true 2 <nil>
	// false 2 true <nil>
	// false false <nil>
}

func ExampleRateLimiters_TokenBucket() {
	ctx := context.Background()
	limits := prim.New(exampleClient).WithPrefix("example-bucket:").RateLimiters()
	// A bucket of 10 tokens, refilled continuously at 10 per second.
	lim, err := limits.TokenBucket("limits:api", 10, 10, time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := lim.Allow(ctx, 10)
	fmt.Println(d.Allowed, d.Remaining, err)
	d, _ = lim.Allow(ctx, 5)
	// Five tokens take half a second to come back.
	fmt.Println(d.Allowed, d.RetryAfter > 400*time.Millisecond && d.RetryAfter <= 500*time.Millisecond)
	time.Sleep(d.RetryAfter)
	d, _ = lim.Allow(ctx, 5)
	fmt.Println(d.Allowed)
	// Output:
	// true 0 <nil>
	// false true
	// true
}

// Wait waits for its permits (by default in a queue as large as the limit;
// see WithQueue), bounded by its context; WithQueue(0, …) refuses at once
// instead.
func ExampleLimiter_Wait() {
	limits := prim.New(exampleClient).WithPrefix("example-wait:").RateLimiters()
	// One token, one more every 200ms.
	lim, err := limits.TokenBucket("limits:jobs", 1, 1, 200*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := lim.Wait(ctx, 1)
	fmt.Println(d.Allowed, err)
	d, err = lim.Wait(ctx, 1) // waits for the next token
	fmt.Println(d.Allowed, err)

	noQueue, err := limits.TokenBucket("limits:reports", 1, 1, time.Minute, prim.WithQueue(0, prim.OldestFirst))
	if err != nil {
		fmt.Println(err)
		return
	}
	d, _ = noQueue.Wait(ctx, 1)
	fmt.Println(d.Allowed)
	d, err = noQueue.Wait(ctx, 1) // refused at once
	fmt.Println(d.Allowed, errors.Is(err, prim.ErrQueueFull), d.HasRetryAfter)
	// Output:
	// true <nil>
	// true <nil>
	// true
	// false true true
}

func ExampleSemaphore_TryAcquire() {
	ctx := context.Background()
	c := prim.New(exampleClient)
	sem := c.Semaphore("{batch:42}:permits", 4) // no I/O
	p, err := sem.TryAcquire(ctx, 30*time.Second)
	if errors.Is(err, prim.ErrNotAcquired) {
		fmt.Println("all 4 permits are taken; retry later")
		return
	}
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer p.Close()
	// Run the work while holding the permit; stop when p.Done() is closed.
	_, err = c.Semaphore("{batch:42}:permits", 8).TryAcquire(ctx, 30*time.Second)
	fmt.Println(errors.Is(err, prim.ErrCapacityMismatch))
	res, _ := p.Release(ctx)
	fmt.Println(res)
	// Output:
	// true
	// Released
}
