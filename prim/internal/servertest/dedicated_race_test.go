package servertest_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// A fresh client's first dedicated connections, opened at once: go-redis
// v9.23's Conn() shares the client's *Options but not its lock, and the first
// connection of each, when the server refuses the maintenance-notifications
// handshake (redis-8.0, valkey-8.1 over RESP3), writes the options' mode.
// prim opens a node's first dedicated connection alone, so under -race this
// shows no data race (it did before: CI's scenarios/mutants, in renewals).
func TestDedicatedFirstUseConcurrent(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		for round := range 3 {
			ctx := ctxT(t, time.Minute)
			c, _ := e.client(t) // fresh: no connection yet
			co := prim.New(c)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := co.Semaphore(e.k(fmt.Sprintf("r%d:s%d", round, i)), 1).TryAcquire(ctx, 5*time.Second)
					if err != nil {
						errs <- err
						return
					}
					_, _ = p.Release(ctx)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
	})
}
