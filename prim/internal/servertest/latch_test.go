package servertest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

type waitResult struct {
	done bool
	err  error
}

// startWaits starts n waits on l and returns their results' channel.
func startWaits(ctx context.Context, l *prim.CountdownLatch, n int) <-chan waitResult {
	ch := make(chan waitResult, n)
	for range n {
		go func() {
			done, err := l.Wait(ctx)
			ch <- waitResult{done, err}
		}()
	}
	return ch
}

// collect takes n results within d, failing the test otherwise.
func collect(t *testing.T, what string, ch <-chan waitResult, n int, d time.Duration) []waitResult {
	t.Helper()
	var out []waitResult
	timeout := time.After(d)
	for len(out) < n {
		select {
		case r := <-ch:
			out = append(out, r)
		case <-timeout:
			t.Fatalf("%s: %d of %d waits returned within %v", what, len(out), n, d)
		}
	}
	return out
}

// quiet checks that no wait returns within d.
func quiet(t *testing.T, what string, ch <-chan waitResult, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: a wait returned early: %v %v", what, r.done, r.err)
	case <-time.After(d):
	}
}

// TestLatchAcrossCoordinators: one generation shared by three Coordinators
// (three clients, go-redis default options): waits complete only at zero, the
// signals count 2, 1, 0, and one more is an error, never an underflow.
func TestLatchAcrossCoordinators(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		key := e.k("{latch}")
		e.admin.Del(ctx, key)
		var cos []*prim.Coordinator
		for range 3 {
			c, _ := defaultClient(t, e)
			co := prim.New(c)
			t.Cleanup(func() { co.Close() })
			cos = append(cos, co)
		}
		first, err := cos[0].CreateCountdownLatch(ctx, key, 3)
		if err != nil {
			t.Fatal(err)
		}
		latches := []*prim.CountdownLatch{first}
		for _, co := range cos[1:] {
			l, err := co.JoinCountdownLatch(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if l.Generation() != first.Generation() {
				t.Fatalf("joined generation %q, created %q", l.Generation(), first.Generation())
			}
			latches = append(latches, l)
		}
		waits := make(chan waitResult, 9)
		for _, l := range latches {
			for range 3 {
				go func() {
					done, err := l.Wait(ctx)
					waits <- waitResult{done, err}
				}()
			}
		}
		var got []int64
		for i, l := range latches[:2] {
			n, err := l.CountDown(ctx)
			if err != nil {
				t.Fatalf("signal %d: %v", i, err)
			}
			got = append(got, n)
		}
		quiet(t, "count 1", waits, 500*time.Millisecond)
		n, err := latches[2].CountDown(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if !slices.Equal(got, []int64{2, 1, 0}) {
			t.Fatalf("signals returned %v, want [2 1 0]", got)
		}
		// Notified: well before the few-second re-read.
		for _, r := range collect(t, "completion", waits, 9, 1500*time.Millisecond) {
			if !r.done || r.err != nil {
				t.Fatalf("wait: %v %v, want true", r.done, r.err)
			}
		}
		for i, l := range latches {
			if _, err := l.CountDown(ctx); !errors.Is(err, prim.ErrLatchCompleted) {
				t.Fatalf("signal %d after completion: %v, want ErrLatchCompleted", i, err)
			}
		}
		if v := e.admin.HGet(ctx, key, "count").Val(); v != "0" {
			t.Fatalf("count %q after extra signals, want 0", v)
		}
		// A completed generation's waits return at once.
		if done, err := latches[1].Wait(ctx); !done || err != nil {
			t.Fatalf("wait on a completed latch: %v %v", done, err)
		}
	})
}

// TestLatchGenerations: reset wakes old waiters with false and late signals
// cannot touch the new generation; create, join, deletion and cancellation.
func TestLatchGenerations(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := defaultClient(t, e)
		co := prim.New(c)
		defer co.Close()
		key := e.k("{gen}")
		e.admin.Del(ctx, key)

		if _, err := co.JoinCountdownLatch(ctx, key); !errors.Is(err, prim.ErrNotFound) {
			t.Fatalf("join of a missing latch: %v, want ErrNotFound", err)
		}
		old, err := co.CreateCountdownLatch(ctx, key, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := co.CreateCountdownLatch(ctx, key, 5); !errors.Is(err, prim.ErrLatchExists) {
			t.Fatalf("second create: %v, want ErrLatchExists", err)
		}
		if v := e.admin.HGet(ctx, key, "count").Val(); v != "2" {
			t.Fatalf("count %q after a refused create", v)
		}
		// Cancellation of a wait changes nothing.
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		if done, err := old.Wait(cctx); done || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled wait: %v %v", done, err)
		}
		cancel()
		if n, err := old.Count(ctx); n != 2 || err != nil {
			t.Fatalf("count after a cancelled wait: %v %v", n, err)
		}
		if n, err := old.CountDown(ctx); n != 1 || err != nil {
			t.Fatalf("signal: %v %v", n, err)
		}
		waits := startWaits(ctx, old, 4)
		quiet(t, "before reset", waits, 300*time.Millisecond)
		start := time.Now()
		fresh, err := co.ResetCountdownLatch(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if fresh.Generation() == old.Generation() {
			t.Fatal("reset kept the generation")
		}
		for _, r := range collect(t, "reset", waits, 4, 1500*time.Millisecond) {
			if r.done || r.err != nil {
				t.Fatalf("old waiter after reset: %v %v, want false", r.done, r.err)
			}
		}
		t.Logf("old waiters returned %v after the reset", time.Since(start).Round(time.Millisecond))
		// A late signal of the old generation: -1, and the new count untouched.
		if n, err := old.CountDown(ctx); n != -1 || err != nil {
			t.Fatalf("late signal: %v %v, want -1", n, err)
		}
		if n, err := old.Count(ctx); n != -1 || err != nil {
			t.Fatalf("old count: %v %v, want -1", n, err)
		}
		if n, err := fresh.Count(ctx); n != 1 || err != nil {
			t.Fatalf("new count after a late signal: %v %v, want 1", n, err)
		}
		if done, err := old.Wait(ctx); done || err != nil {
			t.Fatalf("wait on a replaced generation: %v %v", done, err)
		}
		joined, err := co.JoinCountdownLatch(ctx, key)
		if err != nil || joined.Generation() != fresh.Generation() {
			t.Fatalf("join after reset: %v %v", joined, err)
		}
		// Deletion ends the generation: waiters return false.
		waits = startWaits(ctx, fresh, 2)
		quiet(t, "before delete", waits, 300*time.Millisecond)
		e.admin.Del(ctx, key)
		for _, r := range collect(t, "delete", waits, 2, 1500*time.Millisecond) {
			if r.done || r.err != nil {
				t.Fatalf("waiter after delete: %v %v, want false", r.done, r.err)
			}
		}
		if n, err := fresh.CountDown(ctx); n != -1 || err != nil {
			t.Fatalf("signal after delete: %v %v, want -1", n, err)
		}
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatal("a signal recreated the deleted latch")
		}
		// Reset is create-or-replace: a missing key starts a latch.
		z, err := co.ResetCountdownLatch(ctx, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := z.Wait(ctx); !done || err != nil {
			t.Fatalf("wait on a count-0 latch: %v %v", done, err)
		}
		if _, err := z.CountDown(ctx); !errors.Is(err, prim.ErrLatchCompleted) {
			t.Fatalf("signal of a count-0 latch: %v", err)
		}
		// A key of another type: typed, nothing written.
		s := e.k("{gen}:string")
		e.admin.Set(ctx, s, "v", 0)
		defer e.admin.Del(ctx, s)
		for _, f := range []func() error{
			func() error { _, err := co.CreateCountdownLatch(ctx, s, 1); return err },
			func() error { _, err := co.ResetCountdownLatch(ctx, s, 1); return err },
			func() error { _, err := co.JoinCountdownLatch(ctx, s); return err },
		} {
			if err := f(); !errors.Is(err, prim.ErrWrongType) {
				t.Fatalf("on a string key: %v, want ErrWrongType", err)
			}
		}
		if e.admin.Get(ctx, s).Val() != "v" {
			t.Fatal("the string changed")
		}
	})
}

// TestLatchLostNotification: the waiter's invalidation is lost (its link
// partitioned while the last signal comes from another client, then its
// connections reset by toxiproxy's reset_peer): completion is delayed, not
// blocked.
func TestLatchLostNotification(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := defaultClient(t, e)
		co := prim.New(c)
		defer co.Close()
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		other := prim.New(e.admin)
		key := e.k("{lost}")
		e.admin.Del(ctx, key)
		l, err := other.CreateCountdownLatch(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		mine, err := co.JoinCountdownLatch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		waits := startWaits(ctx, mine, 3)
		quiet(t, "before the signal", waits, 300*time.Millisecond)
		if err := link.Partition(); err != nil {
			t.Fatal(err)
		}
		if n, err := l.CountDown(ctx); n != 0 || err != nil {
			t.Fatalf("signal: %v %v", n, err)
		}
		signalled := time.Now()
		time.Sleep(200 * time.Millisecond) // the invalidation is swallowed
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := link.ResetPeer(0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // the next bytes reset the connections
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
		for _, r := range collect(t, "after lost notifications", waits, 3, 10*time.Second) {
			if !r.done || r.err != nil {
				t.Fatalf("wait: %v %v, want true", r.done, r.err)
			}
		}
		t.Logf("completed %v after the signal", time.Since(signalled).Round(time.Millisecond))
	})
}

// TestLatchBadInputs: a negative count and an empty key are typed errors,
// with nothing sent or written.
func TestLatchBadInputs(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 30*time.Second)
		c, cnt := e.client(t)
		co := prim.New(c)
		key := e.k("{latchbad}")
		for _, tc := range []struct {
			name string
			f    func() (*prim.CountdownLatch, error)
			want error
		}{
			{"create count -1", func() (*prim.CountdownLatch, error) { return co.CreateCountdownLatch(ctx, key, -1) }, prim.ErrInvalidCount},
			{"reset count -1", func() (*prim.CountdownLatch, error) { return co.ResetCountdownLatch(ctx, key, -1) }, prim.ErrInvalidCount},
			{"create count min", func() (*prim.CountdownLatch, error) { return co.CreateCountdownLatch(ctx, key, -1<<63) }, prim.ErrInvalidCount},
			{"create empty key", func() (*prim.CountdownLatch, error) { return co.CreateCountdownLatch(ctx, "", 1) }, prim.ErrEmptyKey},
			{"reset empty key", func() (*prim.CountdownLatch, error) { return co.ResetCountdownLatch(ctx, "", 1) }, prim.ErrEmptyKey},
			{"join empty key", func() (*prim.CountdownLatch, error) { return co.JoinCountdownLatch(ctx, "") }, prim.ErrEmptyKey},
		} {
			size := e.admin.DBSize(ctx).Val()
			before := cnt.get()
			l, err := tc.f()
			if l != nil || !errors.Is(err, tc.want) || !errors.Is(err, prim.ErrInvalidArgument) {
				t.Errorf("%s: %v %v, want %v", tc.name, l, err, tc.want)
			}
			if cnt.get() != before {
				t.Errorf("%s: %d commands sent", tc.name, cnt.get()-before)
			}
			if after := e.admin.DBSize(ctx).Val(); after > size || e.admin.Exists(ctx, key).Val() != 0 {
				t.Errorf("%s: DBSIZE %d -> %d", tc.name, size, after)
			}
		}
	})
}

// TestLatchCluster: the single-key scripts and the waiter on Cluster.
func TestLatchCluster(t *testing.T) {
	forEachCluster(t, func(t *testing.T, ctx context.Context, c redis.UniversalClient) {
		co := prim.New(c).WithPrefix("app:")
		defer co.Close()
		for _, key := range []string{"{batch:1}:latch", "batch:2:latch", "y"} {
			l, err := co.CreateCountdownLatch(ctx, key, 2)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			j, err := co.JoinCountdownLatch(ctx, key)
			if err != nil || j.Generation() != l.Generation() {
				t.Fatalf("%s: join %v %v", key, j, err)
			}
			waits := startWaits(ctx, j, 2)
			if n, err := l.CountDown(ctx); n != 1 || err != nil {
				t.Fatalf("%s: %v %v", key, n, err)
			}
			if n, err := j.CountDown(ctx); n != 0 || err != nil {
				t.Fatalf("%s: %v %v", key, n, err)
			}
			for _, r := range collect(t, key, waits, 2, 5*time.Second) {
				if !r.done || r.err != nil {
					t.Fatalf("%s: wait %v %v", key, r.done, r.err)
				}
			}
			r, err := co.ResetCountdownLatch(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := l.CountDown(ctx); n != -1 || err != nil {
				t.Fatalf("%s: late signal %v %v", key, n, err)
			}
			if n, err := r.Count(ctx); n != 1 || err != nil {
				t.Fatalf("%s: count %v %v", key, n, err)
			}
		}
	})
}

// TestLatchLostReplies: with go-redis's default options, a create or reset
// whose reply is lost is never resent: ErrUncertain, run once. A resend could
// overwrite a newer generation: A's reset runs and its reply is lost, B's
// reset succeeds, then A's resend (its generation no longer stored) would
// write A's generation over B's. A signal whose reply is lost is never resent
// either: ErrUncertain, counted once.
func TestLatchLostReplies(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, cut := defaultClient(t, e)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		co := prim.New(c)
		key := e.k("{lr}")
		e.admin.Del(ctx, key)
		// Load the scripts: with replies lost a NOSCRIPT would never come back.
		warm, err := co.ResetCountdownLatch(ctx, e.k("{lr}:warm"), 1)
		if err != nil {
			t.Fatal(err)
		}
		warm.CountDown(ctx)
		// A's reset loses its reply; B resets meanwhile (before go-redis's
		// read timeout): B's generation must survive.
		before := cmdCalls(ctx, e.admin, "evalsha", "eval")
		loseOneReply(t, cut, link)
		aErr := make(chan error, 1)
		go func() {
			_, err := co.ResetCountdownLatch(ctx, key, 3)
			aErr <- err
		}()
		if !eventually(5*time.Second, func() bool { return e.admin.HGet(ctx, key, "gen").Val() != "" }) {
			t.Fatal("A's reset never ran")
		}
		b, err := prim.New(e.admin).ResetCountdownLatch(ctx, key, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-aErr; !errors.Is(err, prim.ErrUncertain) {
			t.Fatalf("reset with its reply lost: %v, want ErrUncertain", err)
		}
		time.Sleep(200 * time.Millisecond)
		if g := e.admin.HGet(ctx, key, "gen").Val(); g != b.Generation() {
			t.Fatalf("generation %q on the server, want B's %q: A's resent reset overwrote it", g, b.Generation())
		}
		if n := cmdCalls(ctx, e.admin, "evalsha", "eval") - before; n != 2 {
			t.Fatalf("%d scripts ran, want 2 (A's reset once, B's)", n)
		}
		l, err := co.JoinCountdownLatch(ctx, key)
		if err != nil || l.Generation() != b.Generation() {
			t.Fatalf("join: %v", err)
		}
		before = cmdCalls(ctx, e.admin, "evalsha", "eval")
		loseOneReply(t, cut, link)
		n, err := l.CountDown(ctx)
		if !errors.Is(err, prim.ErrUncertain) {
			t.Fatalf("signal with its reply lost: %v %v, want ErrUncertain", n, err)
		}
		if !eventually(5*time.Second, func() bool { return e.admin.HGet(ctx, key, "count").Val() == "2" }) {
			t.Fatalf("count %q, want 2: the signal ran once", e.admin.HGet(ctx, key, "count").Val())
		}
		time.Sleep(200 * time.Millisecond)
		if n := cmdCalls(ctx, e.admin, "evalsha", "eval") - before; n != 1 {
			t.Fatalf("%d scripts ran, want 1: a signal is never resent", n)
		}
		if v := e.admin.HGet(ctx, key, "count").Val(); v != "2" {
			t.Fatalf("count %q, want 2", v)
		}
	})
}

// TestLatchMalformedState: a latch hash whose count is missing, not a number
// or negative is an error matching ErrLatchState from Wait, Count and Join,
// never a completed latch (count 0, true).
func TestLatchMalformedState(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 30*time.Second)
		c, _ := e.client(t)
		co := prim.New(c)
		key := e.k("{latchmal}")
		for _, tc := range []struct {
			name  string
			spoil func(l *prim.CountdownLatch) error
		}{
			{"count missing", func(l *prim.CountdownLatch) error { return e.admin.HDel(ctx, key, "count").Err() }},
			{"count not a number", func(l *prim.CountdownLatch) error { return e.admin.HSet(ctx, key, "count", "abc").Err() }},
			{"count empty", func(l *prim.CountdownLatch) error { return e.admin.HSet(ctx, key, "count", "").Err() }},
			{"count negative", func(l *prim.CountdownLatch) error { return e.admin.HSet(ctx, key, "count", "-3").Err() }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l, err := co.ResetCountdownLatch(ctx, key, 2)
				if err != nil {
					t.Fatal(err)
				}
				if err := tc.spoil(l); err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				ok, err := l.Wait(wctx)
				if ok || !latchStateErr(err) {
					t.Fatalf("Wait on a malformed latch: %v %v; want false and ErrLatchState", ok, err)
				}
				if n, err := l.Count(ctx); !latchStateErr(err) {
					t.Fatalf("Count on a malformed latch: %d %v; want ErrLatchState", n, err)
				}
				if j, err := co.JoinCountdownLatch(ctx, key); j != nil || !latchStateErr(err) {
					t.Fatalf("Join on a malformed latch: %v %v; want ErrLatchState", j, err)
				}
			})
		}
	})
}

func latchStateErr(err error) bool { return errors.Is(err, prim.ErrLatchState) }
