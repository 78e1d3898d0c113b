package prim_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// redlockClients are three clients of three independent servers; TestMain
// starts them before the examples run.
var redlockClients []redis.UniversalClient

func ExampleNewRedlockGroup() {
	ctx := context.Background()
	a, b, c := redlockClients[0], redlockClients[1], redlockClients[2] // three deployments
	g, err := prim.NewRedlockGroup([]redis.UniversalClient{a, b, c}, prim.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := g.TryAcquire(ctx, "invoice:42", 10*time.Second)
	if errors.Is(err, prim.ErrNotAcquired) {
		fmt.Println("not acquired:", err) // contention, or no quorum (errors.Is prim.ErrNoQuorum)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Close()
	// Complete the protected work within the estimated validity; there is no
	// fencing token to give the resource.
	fmt.Println("acquired on a quorum:", lease.AcquiredOn() >= g.Quorum(), lease.RemainingEstimate() > 9*time.Second)

	// A second owner is refused while the lease is held.
	_, err = g.TryAcquire(ctx, "invoice:42", 10*time.Second)
	fmt.Println("second owner:", errors.Is(err, prim.ErrNotAcquired), errors.Is(err, prim.ErrNoQuorum))

	ok, err := lease.Renew(ctx, 10*time.Second) // on a quorum, or the lease ends
	fmt.Println("renewed:", ok, err)
	released, err := lease.Release(ctx) // true: a majority answered
	fmt.Println("released:", released, err, lease.State())
	// Output:
	// acquired on a quorum: true true
	// second owner: true false
	// renewed: true <nil>
	// released: true <nil> released
}

func ExampleNewRedlockGroup_badInput() {
	a := redlockClients[0]
	_, err := prim.NewRedlockGroup([]redis.UniversalClient{a, a, a})
	fmt.Println(errors.Is(err, prim.ErrDuplicateNode), errors.Is(err, prim.ErrInvalidArgument))
	_, err = prim.NewRedlockGroup(redlockClients[:2])
	fmt.Println(errors.Is(err, prim.ErrTooFewNodes))
	// Output:
	// true true
	// true
}
