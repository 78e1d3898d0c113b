package servertest_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

func TestUncertainOutcomes(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) {
			o.MaxRetries = -1
			o.ContextTimeoutEnabled = true
		}))
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		// cut partitions the link just before the next renewal command is
		// written (after its dedicated connection's CLIENT ID): a black hole that
		// swallows exactly the renewal.
		cut := &cutBefore{}
		c.AddHook(cut)
		co := prim.New(c, prim.WithCleanupTimeout(time.Second),
			prim.WithLogger(slog.New(slog.NewTextHandler(tlog{t}, nil))))
		// Load the scripts on the server: with replies lost, EVALSHA's NOSCRIPT
		// would never come back and EVAL would never be sent.
		if l, err := co.TryAcquireFencedLock(ctx, e.k("{warm}:lease"), e.k("{warm}:fence"), time.Second); err == nil {
			l.Renew(ctx, time.Second)
			l.VerifyStillHeld(ctx)
			l.Release(ctx)
		}
		lease, fence := e.k("{u}:lease"), e.k("{u}:fence")
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}

		heal := func(t *testing.T) {
			t.Cleanup(func() {
				if err := link.Heal(); err != nil {
					t.Error(err)
				}
				e.admin.Del(ctx, lease) // a failed subtest leaves no holder for the next
			})
		}
		// A renewal needs a dedicated connection; one made while the link is
		// healthy is reused, so faults below hit the renewal itself.
		warm := func(t *testing.T, l *prim.FencedLock) {
			if ok, err := l.Renew(ctx, 5*time.Second); !ok || err != nil {
				t.Fatalf("warm-up renewal: %v %v", ok, err)
			}
		}

		t.Run("acquisition reply lost", func(t *testing.T) {
			heal(t)
			if err := link.LoseReplies(); err != nil {
				t.Fatal(err)
			}
			actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			l, err := co.TryAcquireFencedLock(actx, lease, fence, 400*time.Millisecond)
			cancel()
			if l != nil || !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("got %v, %v; want no lock and ErrUncertain", l, err)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
			// The script ran anyway: its lease exists and expires by itself.
			deadline := time.Now().Add(2 * time.Second)
			for e.admin.Exists(ctx, lease).Val() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			gap := e.admin.Get(ctx, fence).Val()
			if gap != "1" {
				t.Fatalf("counter %q: the delayed script did not run", gap)
			}
			for e.admin.Exists(ctx, lease).Val() == 1 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if e.admin.Exists(ctx, lease).Val() == 1 {
				t.Fatal("the unreturned lease did not expire")
			}
			l, err = co.TryAcquireFencedLock(ctx, lease, fence, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if l.FencingToken() != 2 {
				t.Fatalf("next token %d, want 2 (token 1 is a gap)", l.FencingToken())
			}
			l.Release(ctx)
		})

		t.Run("black-holed renewal fails closed", func(t *testing.T) {
			heal(t)
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			warm(t, l)
			cut.arm(link.Partition)
			rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			ok, err := l.Renew(rctx, 5*time.Second)
			cancel()
			if ok || !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("black-holed renewal: %v, %v; want false and ErrUncertain", ok, err)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
			if ok, err := l.Renew(ctx, 5*time.Second); ok {
				t.Fatalf("renewal after an uncertain one succeeded (%v): the handle must fail closed", err)
			}
			if l.RemainingEstimate() != 0 {
				t.Fatal("an uncertain handle still estimates time left")
			}
			// An owner-checked release settles it.
			if r, err := l.Release(ctx); err != nil || (r != prim.Released && r != prim.AlreadyReleased) {
				t.Fatalf("release after uncertainty: %v %v", r, err)
			}
			if e.admin.Exists(ctx, lease).Val() != 0 {
				t.Fatal("lease left after release")
			}
		})

		t.Run("lost renewal reply is fenced and cleaned up", func(t *testing.T) {
			heal(t)
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			warm(t, l)
			// Data of this peer is delayed so the reply comes after the renewal's
			// deadline, while the renewal itself reaches the server: it runs, and
			// its caller cannot know.
			cut.arm(func() error { return link.Latency(100*time.Millisecond, 0) })
			rctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			ok, err := l.Renew(rctx, 30*time.Second)
			cancel()
			if ok || !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("slow renewal: %v %v", ok, err)
			}
			// Fenced (CLIENT KILL) and released owner-checked in the background,
			// after Renew returned at its deadline: the lease goes, and its
			// dedicated connection is closed on the server.
			deadline := time.Now().Add(3 * time.Second)
			for e.admin.Exists(ctx, lease).Val() != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if e.admin.Exists(ctx, lease).Val() != 0 {
				t.Fatal("the uncertain renewal was not cleaned up within 3s")
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("release queued behind an in-flight renewal", func(t *testing.T) {
			heal(t)
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			warm(t, l)
			if err := link.Latency(150*time.Millisecond, 0); err != nil {
				t.Fatal(err)
			}
			done := make(chan bool)
			go func() {
				ok, _ := l.Renew(ctx, 5*time.Second)
				done <- ok
			}()
			time.Sleep(30 * time.Millisecond)
			qctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			_, err = l.Release(qctx)
			cancel()
			if !errors.Is(err, prim.ErrReleasePending) {
				t.Fatalf("queued release: %v, want ErrReleasePending", err)
			}
			if !<-done {
				t.Fatal("the in-flight renewal failed")
			}
			deadline := time.Now().Add(3 * time.Second)
			for e.admin.Exists(ctx, lease).Val() == 1 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if e.admin.Exists(ctx, lease).Val() == 1 {
				t.Fatal("the queued release never ran")
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
		})
	})
}

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// cutBefore applies a fault right before the next EVALSHA/EVAL, SET or DELEX
// once armed: a script, or the command that replaces it where the server has
// it (SET … IFEQ for a renewal, DELEX for a release).
type cutBefore struct {
	mu    sync.Mutex
	fault func() error
}

func (c *cutBefore) arm(f func() error) { c.mu.Lock(); c.fault = f; c.mu.Unlock() }

func (c *cutBefore) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cutBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" || n == "set" || n == "delex" {
			c.mu.Lock()
			f := c.fault
			c.fault = nil
			c.mu.Unlock()
			if f != nil {
				if err := f(); err != nil {
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}
func (c *cutBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
