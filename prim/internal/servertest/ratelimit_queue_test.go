package servertest_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestWaitRidesOutRefusedLink: a request queued on a limiter whose server
// becomes unreachable keeps waiting; its decisions fail and the queue backs off
// (capped exponential, not a tight loop: a handful of attempts in the outage),
// and it is granted soon after the link heals.
func TestWaitRidesOutRefusedLink(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		// Not the defaults, on purpose: the test counts the queue's attempts
		// during the outage, and with MaxRetries 3 each attempt is up to four
		// sends (prim resends a script itself, per the client's policy), which
		// blurs "a handful of attempts" against "a tight loop"; the short
		// timeouts keep the outage's attempts within the test's minute. The
		// default path of a failing decision is TestRateLimitUncertain's.
		c, ctr := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) {
			o.MaxRetries = -1
			o.DialTimeout = 300 * time.Millisecond
			o.ReadTimeout = 300 * time.Millisecond
		}))
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		for _, algo := range []prim.Algorithm{prim.AlgoFixedWindow, prim.AlgoTokenBucket} {
			t.Run(string(algo), func(t *testing.T) {
				rl := prim.New(c).RateLimiters()
				period := 500 * time.Millisecond
				var l *prim.Limiter
				if algo == prim.AlgoFixedWindow {
					l, err = rl.FixedWindow(e.k("refused:"+string(algo)), 1, period, prim.WithQueue(1, prim.OldestFirst))
				} else {
					l, err = rl.TokenBucket(e.k("refused:"+string(algo)), 1, 1, period, prim.WithQueue(1, prim.OldestFirst))
				}
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
					t.Fatalf("first: %+v %v", d, err)
				}
				type res struct {
					d   prim.Decision
					err error
				}
				done := make(chan res, 1)
				go func() {
					d, err := l.Wait(ctx, 1)
					done <- res{d, err}
				}()
				deadline := time.Now().Add(5 * time.Second)
				for l.Stats().QueuedPermits != 1 {
					if time.Now().After(deadline) {
						t.Fatal("never queued")
					}
					time.Sleep(5 * time.Millisecond)
				}
				if err := link.Refuse(); err != nil {
					t.Fatal(err)
				}
				before := ctr.n.Load()
				outage := 2 * time.Second
				time.Sleep(outage)
				select {
				case r := <-done:
					t.Fatalf("Wait ended during the outage: %+v %v", r.d, r.err)
				default:
				}
				attempts := ctr.n.Load() - before
				t.Logf("%d commands during the %v outage", attempts, outage)
				if err := link.Heal(); err != nil {
					t.Fatal(err)
				}
				// Backoff from 10ms doubling to 1s: about 8 attempts in 2s
				// (each may count a dial's handshake commands too); a tight
				// loop would make hundreds.
				if attempts > 60 {
					t.Fatalf("%d commands in a %v outage: no backoff", attempts, outage)
				}
				select {
				case r := <-done:
					if r.err != nil || !r.d.Allowed {
						t.Fatalf("after heal: %+v %v", r.d, r.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("not granted within 10s of the heal")
				}
			})
		}
	})
}
