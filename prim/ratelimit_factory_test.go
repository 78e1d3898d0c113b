package prim

import (
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRateLimitersWithPrefixRace: RateLimiters and WithPrefix on the same
// Coordinator at once are no data race (run under -race), each returns the
// same factory at every call, and a view's factory is the view's own.
func TestRateLimitersWithPrefixRace(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing is sent
	defer rc.Close()
	c := New(rc)
	var wg sync.WaitGroup
	views := make(chan *Coordinator, 100)
	wg.Add(2)
	go func() {
		defer wg.Done()
		first := c.RateLimiters()
		for range 100 {
			if c.RateLimiters() != first {
				t.Error("RateLimiters returned two factories")
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range 100 {
			views <- c.WithPrefix("p:")
		}
	}()
	wg.Wait()
	close(views)
	f := c.RateLimiters()
	for v := range views {
		vf, again := v.RateLimiters(), v.RateLimiters()
		if vf == f || vf != again || vf.c != v {
			t.Fatal("a view's factory is not its own, or not the same at every call")
		}
	}
}
