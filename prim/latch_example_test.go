package prim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

func ExampleCoordinator_CreateCountdownLatch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := prim.New(exampleClient).WithPrefix("example-latch:")
	defer c.Close() // stops the invalidation watchers; the client stays open
	latch, err := c.ResetCountdownLatch(ctx, "{batch:42}:latch", 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	completed := make(chan bool)
	go func() {
		done, _ := latch.Wait(ctx) // false if the generation is replaced or deleted
		completed <- done
	}()
	for range 3 {
		// Each worker, in any process: JoinCountdownLatch(ctx, key), then CountDown.
		worker, err := c.JoinCountdownLatch(ctx, "{batch:42}:latch")
		if err != nil {
			fmt.Println(err)
			return
		}
		remaining, _ := worker.CountDown(ctx)
		fmt.Println("remaining", remaining)
	}
	if <-completed {
		fmt.Println("all workers finished")
	}
	// Output:
	// remaining 2
	// remaining 1
	// remaining 0
	// all workers finished
}
