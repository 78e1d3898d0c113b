package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestResendRefusedAfterLostReply: an acquisition whose reply is lost after it
// ran, and whose resend the server then refuses, has an unknown outcome. The
// refusal (here NOPERM: the user lost the right to run scripts in between;
// in production a READONLY from a demoted primary, or a pool timeout) says
// nothing about the first attempt, which holds the lease. Reporting it as a
// definite failure tells the caller "not acquired" while the lease is its own:
// the phantom owner the harness's no-phantom-owner check looks for. Default
// client options (MaxRetries 3).
func TestResendRefusedAfterLostReply(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		user := "resend-" + e.peer
		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "on", ">resend-pw", "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.admin.Do(context.Background(), "ACL", "DELUSER", user) })
		c, _ := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) { o.Username, o.Password = user, "resend-pw" }))
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		co := prim.New(c, prim.WithCleanupTimeout(time.Second))
		tag := fmt.Sprintf("{r%d}", time.Now().UnixNano())
		lease, fence := e.k(tag+":lease"), e.k(tag+":fence")
		// Warm up: the script cached (a lost NOSCRIPT would never be resent as
		// EVAL) and a pooled connection ready.
		if l, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second); err != nil {
			t.Fatal(err)
		} else if _, err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}

		if err := link.LoseReplies(); err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *prim.FencedLock
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
			done <- result{l, err}
		}()
		// The first attempt ran once the lease exists; then the user may no
		// longer run scripts and the replies flow again.
		for {
			n, err := e.admin.Exists(ctx, lease).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			select {
			case r := <-done:
				t.Fatalf("answered before its script ran: %v %v", r.l, r.err)
			case <-time.After(2 * time.Millisecond):
			}
		}
		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "-@scripting").Err(); err != nil {
			t.Fatal(err)
		}
		// The reply is lost for good: every connection of the link is closed
		// (toxiproxy would deliver a held reply once healed), and the resends
		// meet a closed port until the link reopens.
		if err := link.Refuse(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		held, _ := e.admin.Get(ctx, lease).Result()
		t.Logf("answer: %v; the lease holds %q", r.err, held)
		if r.l != nil {
			t.Fatalf("acquired after a refused resend: %v", r.l.FencingToken())
		}
		if !errors.Is(r.err, prim.ErrUncertain) {
			t.Fatalf("the first attempt holds the lease (%q), and the answer was not ErrUncertain: %v", held, r.err)
		}
	})
}
