package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The tests in this file run prim on a client with go-redis's default options
// (MaxRetries 3, ContextTimeoutEnabled false), as users have it. Only the read
// timeout is shortened (1s instead of the testbed's 3s) so a lost reply is
// noticed, and resent, sooner; it is not an option prim relies on.

func defaultClient(t *testing.T, e *env) (redis.UniversalClient, *cutBefore) {
	c, _ := e.client(t, testbed.WithTimeout(time.Second))
	o := c.(*redis.Client).Options()
	if o.MaxRetries != 3 || o.ContextTimeoutEnabled {
		t.Fatalf("client options: MaxRetries %d ContextTimeoutEnabled %v; want go-redis's defaults", o.MaxRetries, o.ContextTimeoutEnabled)
	}
	cut := &cutBefore{}
	c.AddHook(cut)
	return c, cut
}

func cmdCalls(ctx context.Context, a *redis.Client, cmds ...string) int64 {
	info := a.Info(ctx, "commandstats").Val()
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, c := range cmds {
			if strings.HasPrefix(line, "cmdstat_"+c+":calls=") {
				var v int64
				fmt.Sscanf(strings.TrimPrefix(line, "cmdstat_"+c+":calls="), "%d", &v)
				n += v
			}
		}
	}
	return n
}

// loseOneReply arms the link to drop replies right before the next script is
// written, and heals it 300ms later, while go-redis still waits for the reply:
// its resend (after the read timeout) goes through.
func loseOneReply(t *testing.T, cut *cutBefore, link *testbed.Link) {
	cut.arm(func() error {
		if err := link.LoseReplies(); err != nil {
			return err
		}
		time.AfterFunc(300*time.Millisecond, func() {
			if err := link.Heal(); err != nil {
				t.Error(err)
			}
		})
		return nil
	})
}

// TestResentScripts: go-redis resends a script whose reply was lost. The
// resent acquisition must answer the true outcome (the same token), never
// ErrNotAcquired against its own lease; a release is never resent, so a lost
// reply is ErrUncertain, never a false AlreadyReleased or NotOwned.
func TestResentScripts(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, cut := defaultClient(t, e)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = link.Heal() })
		co := prim.New(c)
		defer co.Close()
		lease, fence := e.k("{r}:lease"), e.k("{r}:fence")
		// Scripts cached on the server first: a lost NOSCRIPT reply is another test.
		if l, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second); err == nil {
			l.Release(ctx)
		}
		e.admin.Del(ctx, fence)

		t.Run("acquisition", func(t *testing.T) {
			before := cmdCalls(ctx, e.admin, "evalsha", "eval")
			loseOneReply(t, cut, link)
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
			runs := cmdCalls(ctx, e.admin, "evalsha", "eval") - before
			if runs < 2 {
				t.Fatalf("the server ran the script %d times: the client did not resend it, the test proves nothing", runs)
			}
			if err != nil {
				t.Fatalf("resent acquisition: %v; want the lock it took (the server ran it %d times)", err, runs)
			}
			defer l.Release(ctx)
			if got := e.admin.Get(ctx, fence).Val(); got != fmt.Sprint(l.FencingToken()) {
				t.Fatalf("token %d, counter %s: a resend must not take a second token", l.FencingToken(), got)
			}
			if got := e.admin.Get(ctx, lease).Val(); got != l.OwnerToken() {
				t.Fatalf("lease holds %q, the handle's owner is %q", got, l.OwnerToken())
			}
		})

		t.Run("release", func(t *testing.T) {
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			loseOneReply(t, cut, link)
			r, err := l.Release(ctx)
			if err == nil {
				t.Fatalf("release with its reply lost answered %v; want ErrUncertain (a resend cannot tell released from gone)", r)
			}
			if !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("release with its reply lost: %v, want ErrUncertain", err)
			}
			if l.State() != prim.StateUncertain {
				t.Fatalf("state %v after an uncertain release", l.State())
			}
			time.Sleep(400 * time.Millisecond) // healed
			if e.admin.Exists(ctx, lease).Val() != 0 {
				t.Fatal("the release did not run")
			}
			if r, err := l.Release(ctx); err != nil || r != prim.AlreadyReleased {
				t.Fatalf("second release: %v %v", r, err)
			}
		})
	})
}

// TestServerRefusalsTyped: an error reply of the server is the server's error,
// typed, with nothing written — never a counter error, "not acquired" or
// "needs Redis 7.4".
func TestServerRefusalsTyped(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			topo := testbed.Standalone(t, b)
			admin := topo.Nodes()[0].Admin()
			hfe := hasFieldExpiry(ctx, admin)
			lease, fence, hash := "{s}:lease", "{s}:fence", "{s}:leases"
			userClient := func(t *testing.T, rules ...any) *prim.Coordinator {
				user := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
				args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all"}, rules...)
				if err := admin.Do(ctx, args...).Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
				c, err := topo.Client(testbed.WithOptions(func(o *redis.UniversalOptions) {
					o.Username, o.Password = user, "pw"
				}))
				if err != nil {
					t.Fatal(err)
				}
				co := prim.New(c)
				t.Cleanup(func() { co.Close() })
				return co
			}
			fencedUnchanged := func(t *testing.T, co *prim.Coordinator, want error) {
				t.Helper()
				admin.Set(ctx, fence, "41", 0)
				before := snapshot(ctx, admin, lease, fence)
				_, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
				if !errors.Is(err, want) || !errors.Is(err, prim.ErrServerRefused) {
					t.Fatalf("acquisition: %v; want %v", err, want)
				}
				if errors.Is(err, prim.ErrCounterInvalid) || errors.Is(err, prim.ErrNotAcquired) {
					t.Fatalf("acquisition: %v is reported as a counter or contention error", err)
				}
				var re *prim.RefusedError
				if !errors.As(err, &re) || re.Code == "" {
					t.Fatalf("no RefusedError in %v", err)
				}
				if after := snapshot(ctx, admin, lease, fence); after != before {
					t.Fatalf("a refused acquisition wrote:\n%s\n%s", before, after)
				}
			}
			// Scripts cached first, so EVALSHA reaches the refused command.
			if l, err := prim.New(admin).TryAcquireFencedLock(ctx, "{w}:l", "{w}:f", time.Second); err == nil {
				l.Release(ctx)
			}

			t.Run("NOPERM on INCR", func(t *testing.T) {
				fencedUnchanged(t, userClient(t, "-incr"), prim.ErrNoPermission)
			})
			t.Run("OOM under noeviction", func(t *testing.T) {
				admin.Set(ctx, fence, "41", 0)
				admin.ConfigSet(ctx, "maxmemory-policy", "noeviction")
				admin.ConfigSet(ctx, "maxmemory", "1")
				t.Cleanup(func() { admin.ConfigSet(context.Background(), "maxmemory", "0") })
				fencedUnchanged(t, prim.New(admin), prim.ErrOutOfMemory)
			})
			t.Run("READONLY on a replica", func(t *testing.T) {
				admin.Set(ctx, fence, "41", 0)
				// A replica of a primary that does not exist keeps its data and
				// refuses writes.
				if err := admin.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { admin.Do(context.Background(), "REPLICAOF", "NO", "ONE") })
				fencedUnchanged(t, prim.New(admin), prim.ErrReadOnly)
			})
			t.Run("lease key of the wrong type", func(t *testing.T) {
				admin.Del(ctx, lease)
				admin.HSet(ctx, lease, "f", "v")
				t.Cleanup(func() { admin.Del(context.Background(), lease) })
				before := snapshot(ctx, admin, lease, fence)
				_, err := prim.New(admin).TryAcquireFencedLock(ctx, lease, fence, time.Second)
				if !errors.Is(err, prim.ErrWrongType) || errors.Is(err, prim.ErrNotAcquired) {
					t.Fatalf("lease key holding a hash: %v; want ErrWrongType", err)
				}
				if after := snapshot(ctx, admin, lease, fence); after != before {
					t.Fatalf("wrote:\n%s\n%s", before, after)
				}
			})
			if !hfe {
				t.Logf("%s has no hash-field expiry: the hash-lease refusals do not apply", b)
				return
			}
			t.Run("NOPERM on HPTTL is not 'needs Redis 7.4'", func(t *testing.T) {
				co := userClient(t, "-hpttl")
				_, err := co.TryAcquireLease(ctx, hash, "f", time.Second)
				if !errors.Is(err, prim.ErrNoPermission) || errors.Is(err, prim.ErrFeatureUnsupported) {
					t.Fatalf("HPTTL refused by ACL: %v; want ErrNoPermission", err)
				}
			})
			t.Run("HPEXPIRE refused leaves no field without expiry", func(t *testing.T) {
				admin.Del(ctx, hash)
				admin.HSet(ctx, hash, "other", "x")
				co := userClient(t, "-hpexpire", "-hsetex")
				_, err := co.TryAcquireLease(ctx, hash, "f", 10*time.Second)
				if !errors.Is(err, prim.ErrNoPermission) {
					t.Fatalf("HPEXPIRE refused: %v; want ErrNoPermission", err)
				}
				time.Sleep(100 * time.Millisecond) // the background owner-checked release, if any
				if admin.HExists(ctx, hash, "f").Val() {
					ttl, _ := admin.Do(ctx, "HPTTL", hash, "FIELDS", 1, "f").Slice()
					t.Fatalf("the refused acquisition left field f (HPTTL %v): a lease without expiry", ttl)
				}
			})
			t.Run("hash key of the wrong type", func(t *testing.T) {
				admin.Del(ctx, hash)
				admin.Set(ctx, hash, "x", 0)
				_, err := prim.New(admin).TryAcquireLease(ctx, hash, "f", time.Second)
				if !errors.Is(err, prim.ErrWrongType) {
					t.Fatalf("hash key holding a string: %v; want ErrWrongType", err)
				}
			})
		})
	}
}

// TestDoneContextSendsNothing: Release, Renew and VerifyStillHeld with a context
// already done send nothing, return ctx's error and leave the handle as it was
// — every time, not one of two answers at random.
func TestDoneContextSendsNothing(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, cnt := e.client(t)
		co := prim.New(c)
		defer co.Close()
		l, err := co.TryAcquireFencedLock(ctx, e.k("{d}:lease"), e.k("{d}:fence"), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		before := cnt.get()
		for i := range 200 {
			if r, err := l.Release(done); !errors.Is(err, context.Canceled) || errors.Is(err, prim.ErrReleasePending) || errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("release %d with a done context: %v %v; want context.Canceled alone", i, r, err)
			}
			if ok, err := l.Renew(done, time.Minute); ok || !errors.Is(err, context.Canceled) || errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("renew %d with a done context: %v %v", i, ok, err)
			}
			if ok, err := l.VerifyStillHeld(done); ok || !errors.Is(err, context.Canceled) {
				t.Fatalf("verify %d with a done context: %v %v", i, ok, err)
			}
		}
		if n := cnt.get() - before; n != 0 {
			t.Fatalf("%d commands sent with a done context", n)
		}
		if l.State() != prim.StateHeld || l.RemainingEstimate() <= 0 {
			t.Fatalf("handle changed: %v, %v left", l.State(), l.RemainingEstimate())
		}
		if r, err := l.Release(ctx); r != prim.Released || err != nil {
			t.Fatalf("release afterwards: %v %v", r, err)
		}
	})
}

// TestReturnsByDeadline: with the client's default options a command already
// written is bounded by its read timeout (here 3s, times the resends), not by the
// caller's context. Every prim call returns by its context's deadline anyway.
func TestReturnsByDeadline(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 2*time.Minute)
		c, _ := e.client(t) // the testbed's 3s timeouts, go-redis's default retries
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = link.Heal() })
		co := prim.New(c, prim.WithCleanupTimeout(time.Second))
		defer co.Close()
		hfe := hasFieldExpiry(ctx, e.admin)
		lease, fence, hash := e.k("{b}:lease:"), e.k("{b}:fence:"), e.k("{b}:hash")
		// One lock per operation, so no operation waits behind another's
		// background settling; each used once while healthy (dedicated
		// connections and scripts in place).
		held := map[string]*prim.FencedLock{}
		for _, op := range []string{"verify", "renew", "release"} {
			l, err := co.TryAcquireFencedLock(ctx, lease+op, fence+op, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			l.Renew(ctx, time.Minute)
			l.VerifyStillHeld(ctx)
			held[op] = l
		}
		if hfe {
			if hl, err := co.TryAcquireLease(ctx, hash, "warm", time.Second); err == nil {
				hl.Release(ctx)
			}
		}
		const budget = 300 * time.Millisecond
		const slack = 700 * time.Millisecond // what a caller would notice beyond its own deadline
		check := func(name string, f func(ctx context.Context) error) {
			t.Helper()
			cctx, cancel := context.WithTimeout(ctx, budget)
			defer cancel()
			start := time.Now()
			err := f(cctx)
			took := time.Since(start)
			t.Logf("%s on a silent link: returned after %v: %v", name, took.Round(time.Millisecond), err)
			if took > budget+slack {
				t.Errorf("%s took %v with a %v deadline", name, took.Round(time.Millisecond), budget)
			}
			if err == nil {
				t.Errorf("%s succeeded on a silent link", name)
			}
		}
		if err := link.Partition(); err != nil {
			t.Fatal(err)
		}
		check("TryAcquireFencedLock", func(ctx context.Context) error {
			_, err := co.TryAcquireFencedLock(ctx, e.k("{b2}:lease"), e.k("{b2}:fence"), time.Second)
			return err
		})
		check("AcquireFencedLock", func(ctx context.Context) error {
			_, err := co.AcquireFencedLock(ctx, e.k("{b3}:lease"), e.k("{b3}:fence"), time.Second)
			return err
		})
		check("VerifyStillHeld", func(ctx context.Context) error { _, err := held["verify"].VerifyStillHeld(ctx); return err })
		check("Renew", func(ctx context.Context) error {
			_, err := held["renew"].Renew(ctx, time.Minute)
			if err != nil && !errors.Is(err, prim.ErrUncertain) {
				t.Errorf("renew on a silent link: %v; want ErrUncertain", err)
			}
			return err
		})
		check("Release", func(ctx context.Context) error {
			_, err := held["release"].Release(ctx)
			if err != nil && !errors.Is(err, prim.ErrUncertain) {
				t.Errorf("release on a silent link: %v; want ErrUncertain", err)
			}
			return err
		})
		if hfe {
			check("TryAcquireLease", func(ctx context.Context) error {
				_, err := co.TryAcquireLease(ctx, hash, "f", time.Second)
				return err
			})
		}
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
	})
}
