package servertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// TestSilentPubSubDetected: a Pub/Sub connection that stays open but goes
// silent (its replies dropped by an in-test proxy, every other connection
// untouched) is detected and replaced, and waiters wake (issue 31, item 4).
// Before, the watcher re-sent SUBSCRIBE after each quiet spell but never
// checked that a confirmation came back: a waiter saw the holder's release
// only at its 30 s expiry. It must acquire within 12 s of the release (two
// keep-alive spells of 2 s, a reconnect and a re-check, on a loaded machine).
func TestSilentPubSubDetected(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		proxy := newHoldProxy(t, e.topo.Nodes()[0].DirectAddr())
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's defaults
		defer c.Close()
		co := prim.New(c)
		defer co.Close()
		other, _ := e.client(t)
		lease, fence := e.k("{p}:lease"), e.k("{p}:fence")
		held, err := prim.New(other).TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := co.AcquireFencedLock(ctx, lease, fence, 30*time.Second)
			if err == nil {
				defer l.Release(context.Background())
			}
			got <- err
		}()
		subs := proxy.waitSent("subscribe")
		time.Sleep(500 * time.Millisecond) // the waiter tracks the key
		for _, pc := range subs {
			pc.DropReplies()
		}
		time.Sleep(300 * time.Millisecond)
		if r, err := held.Release(ctx); r != prim.Released || err != nil {
			t.Fatalf("release: %v %v", r, err)
		}
		released := time.Now()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(12 * time.Second):
			t.Fatalf("the waiter did not wake within 12s of the release over a silent Pub/Sub connection (the holder's lease had 30s)")
		}
		t.Logf("acquired %v after the release", time.Since(released).Round(time.Millisecond))
		// The replacement connects at its first SUBSCRIBE, which the
		// watcher sends right after closing the silent one: wait for it (it
		// may come a moment after the waiter woke).
		for deadline := time.Now().Add(5 * time.Second); len(proxy.Sent("subscribe")) < 2; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d subscribing connections 5s after the wake-up: the silent one was not replaced", len(proxy.Sent("subscribe")))
			}
		}
	})
}
