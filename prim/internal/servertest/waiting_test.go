package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// serverCalls is the server's total command count (INFO commandstats), minus the
// INFO calls that read it.
func serverCalls(ctx context.Context, a *redis.Client) int64 {
	n, _ := commandCalls(ctx, a)
	return n
}

// commandCalls reads INFO commandstats once: the server's total command count
// without INFO, and its script count (EVALSHA and EVAL).
func commandCalls(ctx context.Context, a *redis.Client) (calls, scripts int64) {
	for _, line := range strings.Split(a.Info(ctx, "commandstats").Val(), "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		v, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		calls += v
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			scripts += v
		}
	}
	return calls, scripts
}

func forEachProtocol(t *testing.T, e *env, f func(t *testing.T, c redis.UniversalClient, cnt *counter)) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			c, cnt := e.client(t, testbed.WithProtocol(proto))
			f(t, c, cnt)
		})
	}
}

func TestWaitingHandOff(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		forEachProtocol(t, e, func(t *testing.T, c redis.UniversalClient, cnt *counter) {
			ctx := ctxT(t, time.Minute)
			co := prim.New(c)
			defer co.Close()
			lease, fence := e.k(t.Name()+"{h}:lease"), e.k(t.Name()+"{h}:fence")
			holder, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *prim.FencedLock, 1)
			errc := make(chan error, 1)
			before := cnt.get()
			go func() {
				l, err := co.AcquireFencedLock(ctx, lease, fence, 10*time.Second)
				if err != nil {
					errc <- err
					return
				}
				got <- l
			}()
			time.Sleep(200 * time.Millisecond) // the waiter is registered and asleep
			serverBefore := serverCalls(ctx, e.admin)
			clientBefore := cnt.get()
			time.Sleep(1500 * time.Millisecond)
			idleServer := serverCalls(ctx, e.admin) - serverBefore
			idleClient := cnt.get() - clientBefore
			// While asleep: no acquisition attempts at all, and on the server only
			// the watcher's keep-alive (about one PING a second per node).
			if idleClient != 0 || idleServer > 4 {
				t.Fatalf("an idle waiter issued %d client commands and the server saw %d in 1.5s", idleClient, idleServer)
			}
			released := time.Now()
			if r, err := holder.Release(ctx); r != prim.Released || err != nil {
				t.Fatal(r, err)
			}
			select {
			case l := <-got:
				t.Logf("hand-off took %v; waiter sent %d commands in all", time.Since(released), cnt.get()-before)
				if l.FencingToken() != holder.FencingToken()+1 {
					t.Fatalf("waiter token %d after %d", l.FencingToken(), holder.FencingToken())
				}
				if time.Since(released) > time.Second {
					t.Fatalf("hand-off took %v", time.Since(released))
				}
				// About 6: the release (DELEX, and the script where the build lacks
				// DELEX), the waiter's contended attempt, its tracking read and its
				// winning attempt. 8 leaves room for one extra re-check when the
				// invalidation races the tracking read on a loaded machine (CI saw
				// 7 once, on redis-8.0 over RESP2); polling would send far more,
				// and the idle check above already catches it.
				if n := cnt.get() - before; n > 8 {
					t.Fatalf("waiter sent %d commands for one hand-off", n)
				}
				l.Release(ctx)
			case err := <-errc:
				t.Fatal(err)
			case <-time.After(5 * time.Second):
				t.Fatal("waiter did not acquire after the release")
			}
		})
	})
}

// afterHook runs f once after the first command that matches.
type afterHook struct {
	match func(redis.Cmder) bool
	f     func()
	once  sync.Once
}

func (h *afterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.match(cmd) {
			h.once.Do(h.f)
		}
		return err
	}
}
func (h *afterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The holder leaves right after the waiter's contended attempt and before its
// tracking read: no invalidation is owed to the waiter for that, so it must see
// the key gone in its tracking read and retry at once rather than sleep until
// the old holder's deadline.
func TestWaitingReleaseBeforeTrackingRead(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		lease, fence := e.k("{b}:lease"), e.k("{b}:fence")
		holder, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The waiter's first acquisition attempt is contended; the lease goes
		// as soon as its reply is in.
		c.AddHook(&afterHook{
			match: func(cmd redis.Cmder) bool {
				// A *redis.Cmd, or prim's wrapper of one (sent with resends off).
				res, ok := cmd.(interface{ Val() any })
				if !ok || cmd.Name() != "evalsha" && cmd.Name() != "eval" {
					return false
				}
				v, _ := res.Val().([]any)
				return len(v) == 2 && v[0] == int64(0)
			},
			f: func() {
				if r, err := holder.Release(context.Background()); r != prim.Released || err != nil {
					t.Errorf("release: %v %v", r, err)
				}
			},
		})
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := co.AcquireFencedLock(actx, lease, fence, 10*time.Second)
		if err != nil {
			t.Fatalf("waiter after %v: %v", time.Since(start), err)
		}
		if el := time.Since(start); el > time.Second {
			t.Fatalf("waiter acquired only after %v", el)
		}
		if l.FencingToken() != holder.FencingToken()+1 {
			t.Fatalf("waiter token %d after %d", l.FencingToken(), holder.FencingToken())
		}
		l.Release(ctx)
	})
}

// TestWaitingExpiryWithoutRelease: a holder vanishes without releasing and
// the waiter takes the lock when the lease runs out, on its own: on a server
// of its own whose active expiry is off (DEBUG SET-ACTIVE-EXPIRE 0), so no
// invalidation comes until a client touches the key, and a waiter that
// counted on the server's expiry notice would wait until its context ended.
func TestWaitingExpiryWithoutRelease(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, time.Minute)
			topo := testbed.Standalone(t, b)
			if err := topo.Nodes()[0].Admin().Do(ctx, "DEBUG", "SET-ACTIVE-EXPIRE", "0").Err(); err != nil {
				t.Fatal(err)
			}
			c, err := topo.Client()
			if err != nil {
				t.Fatal(err)
			}
			co := prim.New(c)
			defer co.Close()
			lease, fence := "{x}:lease", "{x}:fence"
			const ttl = 700 * time.Millisecond
			start := time.Now()
			if _, err := co.TryAcquireFencedLock(ctx, lease, fence, ttl); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := co.AcquireFencedLock(wctx, lease, fence, time.Second)
			if err != nil {
				t.Fatalf("waiter after %v: %v", time.Since(start), err)
			}
			el := time.Since(start)
			// Not before the lease ran out; soon after it. A waiter that
			// counted on the expiry notice would wait for its 10s context:
			// 1.5s keeps clear of a loaded CI machine (it took 250ms more
			// than a quiet one) and of that.
			if el < ttl-20*time.Millisecond || el > ttl+1500*time.Millisecond {
				t.Fatalf("waiter acquired after %v; the lease ran %v", el, ttl)
			}
			l.Release(ctx)
		})
	}
}

func TestWaitingLostNotifications(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t, testbed.WithTimeout(500*time.Millisecond))
		co := prim.New(c)
		defer co.Close()
		lease, fence := e.k("{n}:lease"), e.k("{n}:fence")
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		for _, fault := range []string{"client-kill", "partition"} {
			t.Run(fault, func(t *testing.T) {
				holder, err := co.TryAcquireFencedLock(ctx, lease, fence, 20*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				got := waitFor(ctx, co, lease, fence)
				time.Sleep(200 * time.Millisecond)
				switch fault {
				case "client-kill":
					// Kill every tracking and invalidation connection of the server.
					for _, line := range strings.Split(e.admin.ClientList(ctx).Val(), "\n") {
						if strings.Contains(line, "flags=t") || strings.Contains(line, "cmd=subscribe") || strings.Contains(line, "cmd=ping") && strings.Contains(line, "sub=1") {
							id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
							e.admin.Do(ctx, "CLIENT", "KILL", "ID", id)
						}
					}
				case "partition":
					if err := link.Partition(); err != nil {
						t.Fatal(err)
					}
					time.Sleep(1500 * time.Millisecond)
					if err := link.Heal(); err != nil {
						t.Fatal(err)
					}
				}
				// The holder releases through another peer's client: the
				// invalidation may be lost, the waiter must still acquire promptly.
				time.Sleep(100 * time.Millisecond)
				e.admin.Del(ctx, lease)
				_ = holder
				select {
				case err := <-got:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(8 * time.Second):
					t.Fatal("waiter did not acquire after its notifications were lost")
				}
			})
		}
	})
}

func TestWaitingFlushAndCancel(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		lease, fence := e.k("{f}:lease"), e.k("{f}:fence")
		if _, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		// A cancelled waiter returns and leaves nothing behind.
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := co.AcquireFencedLock(cctx, lease, fence, 10*time.Second)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled waiter: %v", err)
		}
		// FLUSHDB (a null invalidation) wakes the waiter, which then acquires.
		got := waitFor(ctx, co, lease, fence)
		time.Sleep(200 * time.Millisecond)
		// Only this test's keys go: the other builds' servers are separate, and
		// FLUSHDB with this test's keys alone in flight is what matters here.
		start := time.Now()
		if err := e.admin.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > time.Second {
				t.Fatalf("flush woke the waiter after %v", el)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("FLUSHDB did not wake the waiter")
		}
	})
}

func TestWaitingManyWaiters(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 2*time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		lease, fence := e.k("{w}:lease"), e.k("{w}:fence")
		const n = 32
		var (
			holding atomic.Int32
			mu      sync.Mutex
			tokens  []int64
			wg      sync.WaitGroup
			errs    = make(chan error, n)
		)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := co.AcquireFencedLock(ctx, lease, fence, 10*time.Second)
				if err != nil {
					errs <- err
					return
				}
				if !holding.CompareAndSwap(0, 1) {
					errs <- errors.New("two holders at once")
				}
				mu.Lock()
				tokens = append(tokens, l.FencingToken())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				holding.Store(0)
				if r, err := l.Release(ctx); r != prim.Released || err != nil {
					errs <- fmt.Errorf("release %v %v", r, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(tokens) != n {
			t.Fatalf("%d of %d waiters acquired", len(tokens), n)
		}
		for i := 1; i < n; i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("tokens not increasing: %v", tokens)
			}
		}
	})
}

// Closing the Coordinator ends the waits in progress at once with ErrClosed
// (not at the holder's deadline, and not by re-checking on a timer), refuses
// new waits without I/O, and leaves immediate acquisitions and held handles
// working.
func TestWaitingCloseEndsWaits(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, cnt := e.client(t)
		co := prim.New(c)
		defer co.Close()
		view := co.WithPrefix("v:")
		lease, fence := e.k("{c}:lease"), e.k("{c}:fence")
		holder, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		vholder, err := view.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The hash-field waiter needs a holder too, where the server has
		// hash-field expiry; elsewhere its wait fails at once with the feature
		// error, which is checked below.
		hl, herr := co.TryAcquireLease(ctx, e.k("{c}:hash"), "f", 30*time.Second)
		errc := make(chan error, 3)
		for _, wait := range []func() error{
			func() error { _, err := co.AcquireFencedLock(ctx, lease, fence, time.Second); return err },
			func() error { _, err := view.AcquireFencedLock(ctx, lease, fence, time.Second); return err },
			func() error { _, err := co.AcquireLease(ctx, e.k("{c}:hash"), "f", time.Second); return err },
		} {
			go func() { errc <- wait() }()
		}
		// Most likely all asleep by now; a wait still connecting its watcher,
		// attempting or tracking must end on Close just the same.
		time.Sleep(300 * time.Millisecond)
		closed := time.Now()
		closeErr := make(chan error, 1)
		go func() { closeErr <- co.Close() }() // the waits end before Close returns
		expectClosed(t, "after 300ms", errc, 3, closed, func(err error) bool {
			// Without hash-field expiry the lease wait failed at once.
			return errors.Is(err, prim.ErrFeatureUnsupported) && herr != nil
		})
		t.Logf("waits ended %v after Close began", time.Since(closed))
		if err := <-closeErr; err != nil {
			t.Fatal(err)
		}
		if err := co.Close(); err != nil { // idempotent
			t.Fatal(err)
		}
		// A new wait fails before any I/O, on the Coordinator and on its views.
		before := cnt.get()
		if _, err := co.AcquireFencedLock(ctx, lease, fence, time.Second); !errors.Is(err, prim.ErrClosed) {
			t.Fatalf("AcquireFencedLock after Close: %v", err)
		}
		if _, err := view.AcquireFencedLock(ctx, lease, fence, time.Second); !errors.Is(err, prim.ErrClosed) {
			t.Fatalf("view's AcquireFencedLock after Close: %v", err)
		}
		if _, err := co.AcquireLease(ctx, e.k("{c}:hash"), "g", time.Second); !errors.Is(err, prim.ErrClosed) {
			t.Fatalf("AcquireLease after Close: %v", err)
		}
		if n := cnt.get() - before; n != 0 {
			t.Fatalf("%d commands sent by waits on a closed Coordinator", n)
		}
		// Handles and immediate acquisitions still work.
		if ok, err := holder.Renew(ctx, 30*time.Second); !ok || err != nil {
			t.Fatalf("renew after Close: %v %v", ok, err)
		}
		if r, err := holder.Release(ctx); r != prim.Released || err != nil {
			t.Fatalf("release after Close: %v %v", r, err)
		}
		vholder.Release(ctx)
		if hl != nil {
			hl.Release(ctx)
		}
		l, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
		if err != nil || l.FencingToken() != holder.FencingToken()+1 {
			t.Fatalf("TryAcquireFencedLock after Close: %v %v", l, err)
		}
		defer l.Release(ctx)
		// Close right after the waits start, while their watcher is still
		// connecting and subscribing, or they are attempting or tracking: they
		// end just as promptly.
		for i := range 8 {
			co2 := prim.New(c)
			errc := make(chan error, 2)
			for range 2 {
				go func() { _, err := co2.AcquireFencedLock(ctx, lease, fence, time.Second); errc <- err }()
			}
			time.Sleep(time.Duration(i) * time.Millisecond)
			closed := time.Now()
			go co2.Close()
			expectClosed(t, fmt.Sprintf("after %dms", i), errc, 2, closed, nil)
		}
	})
}

// expectClosed takes n wait results from errc: each must match ErrClosed (or
// pass other), none may come later than 2s, and all within 1s of closed.
func expectClosed(t *testing.T, when string, errc <-chan error, n int, closed time.Time, other func(error) bool) {
	t.Helper()
	for range n {
		select {
		case err := <-errc:
			if other != nil && other(err) {
				continue
			}
			if !errors.Is(err, prim.ErrClosed) {
				t.Fatalf("a wait closed %s ended with %v, want ErrClosed", when, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("a wait closed %s outlived Close by 2s", when)
		}
	}
	if d := time.Since(closed); d > time.Second {
		t.Fatalf("waits closed %s took %v to end after Close began", when, d)
	}
}
