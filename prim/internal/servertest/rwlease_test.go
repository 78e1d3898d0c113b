package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// eventually polls cond every 10ms for at most d (a bound a user would call
// "promptly" on a loaded machine) and reports whether it came true.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRWLeases: readers coexist, a writer excludes everyone, expiry frees, and
// the key's expiry follows the latest owner deadline. go-redis default options.
func TestRWLeases(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := defaultClient(t, e)
		co := prim.New(c)
		key := e.k("{rw}")
		e.admin.Del(ctx, key)

		t.Run("readers coexist, writers exclude", func(t *testing.T) {
			const n = 20
			var readers []*prim.RWLease
			for i := range n {
				r, err := co.TryAcquireReadLock(ctx, key, 30*time.Second)
				if err != nil {
					t.Fatalf("reader %d: %v", i, err)
				}
				if r.Write() || !strings.HasPrefix(r.OwnerToken(), "r:") {
					t.Fatalf("reader %d: write %v owner %q", i, r.Write(), r.OwnerToken())
				}
				readers = append(readers, r)
			}
			if got := e.admin.ZCard(ctx, key).Val(); got != n {
				t.Fatalf("%d owners in the set, want %d", got, n)
			}
			if w, err := co.TryAcquireWriteLock(ctx, key, 30*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("writer beside %d readers: %v %v, want ErrNotAcquired", n, w, err)
			}
			for i, r := range readers[:n-1] {
				if res, err := r.Release(ctx); res != prim.Released || err != nil {
					t.Fatalf("release reader %d: %v %v", i, res, err)
				}
			}
			if w, err := co.TryAcquireWriteLock(ctx, key, 30*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("writer beside one reader: %v %v, want ErrNotAcquired", w, err)
			}
			if res, err := readers[n-1].Release(ctx); res != prim.Released || err != nil {
				t.Fatalf("release last reader: %v %v", res, err)
			}
			if e.admin.Exists(ctx, key).Val() != 0 {
				t.Fatal("the key outlived its last owner")
			}
			w, err := co.TryAcquireWriteLock(ctx, key, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !w.Write() || !strings.HasPrefix(w.OwnerToken(), "w:") {
				t.Fatalf("writer: write %v owner %q", w.Write(), w.OwnerToken())
			}
			if r, err := co.TryAcquireReadLock(ctx, key, 30*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("reader beside a writer: %v %v, want ErrNotAcquired", r, err)
			}
			if w2, err := co.TryAcquireWriteLock(ctx, key, 30*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("writer beside a writer: %v %v, want ErrNotAcquired", w2, err)
			}
			if got := e.admin.ZCard(ctx, key).Val(); got != 1 {
				t.Fatalf("%d owners beside the writer, want 1 (refused attempts write nothing)", got)
			}
			if res, err := w.Release(ctx); res != prim.Released || err != nil {
				t.Fatalf("release writer: %v %v", res, err)
			}
			if res, err := w.Release(ctx); res != prim.AlreadyReleased || err != nil {
				t.Fatalf("second release: %v %v", res, err)
			}
		})

		t.Run("key expiry follows the latest deadline", func(t *testing.T) {
			short, err := co.TryAcquireReadLock(ctx, key, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			long, err := co.TryAcquireReadLock(ctx, key, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if p := e.admin.PTTL(ctx, key).Val(); p <= 15*time.Second || p > 20*time.Second {
				t.Fatalf("PTTL %v with owners of 2s and 20s", p)
			}
			long.Release(ctx)
			if p := e.admin.PTTL(ctx, key).Val(); p <= 0 || p > 2*time.Second {
				t.Fatalf("PTTL %v after the 20s owner left, want at most 2s", p)
			}
			if ok, err := short.Renew(ctx, 10*time.Second); !ok || err != nil {
				t.Fatalf("renew: %v %v", ok, err)
			}
			if p := e.admin.PTTL(ctx, key).Val(); p <= 5*time.Second {
				t.Fatalf("PTTL %v after renewing to 10s", p)
			}
			if ok, err := short.Renew(ctx, time.Second); !ok || err != nil {
				t.Fatalf("renew shorter: %v %v", ok, err)
			}
			if p := e.admin.PTTL(ctx, key).Val(); p <= 0 || p > time.Second {
				t.Fatalf("PTTL %v after renewing to 1s", p)
			}
			short.Release(ctx)
		})

		t.Run("expiry frees", func(t *testing.T) {
			for _, first := range []string{"reader", "writer"} {
				acq := co.TryAcquireReadLock
				if first == "writer" {
					acq = co.TryAcquireWriteLock
				}
				if _, err := acq(ctx, key, 300*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				// Never released: the next writer gets in once it expired.
				start := time.Now()
				var w *prim.RWLease
				if !eventually(5*time.Second, func() bool {
					var err error
					w, err = co.TryAcquireWriteLock(ctx, key, 10*time.Second)
					return err == nil
				}) {
					t.Fatalf("an expired %s still blocks the writer", first)
				}
				if el := time.Since(start); el < 250*time.Millisecond {
					t.Fatalf("the writer got in %v after a 300ms %s lease", el, first)
				}
				if got := e.admin.ZCard(ctx, key).Val(); got != 1 {
					t.Fatalf("%d owners: the expired %s was not pruned", got, first)
				}
				w.Release(ctx)
			}
		})

		t.Run("wrong type", func(t *testing.T) {
			k := e.k("{rw}:string")
			e.admin.Set(ctx, k, "v", 0)
			defer e.admin.Del(ctx, k)
			for _, write := range []bool{false, true} {
				acq := co.TryAcquireReadLock
				if write {
					acq = co.TryAcquireWriteLock
				}
				if _, err := acq(ctx, k, time.Second); !errors.Is(err, prim.ErrWrongType) {
					t.Fatalf("write %v: %v, want ErrWrongType", write, err)
				}
			}
			if v := e.admin.Get(ctx, k).Val(); v != "v" || e.admin.PTTL(ctx, k).Val() != -1 {
				t.Fatalf("the string changed: %q", v)
			}
		})
	})
}

// TestRWLeaseHandleRules: renew, verify, release and Close as the reference
// says them.
func TestRWLeaseHandleRules(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := defaultClient(t, e)
		co := prim.New(c, prim.WithCleanupTimeout(time.Second))
		key := e.k("{rwh}")
		e.admin.Del(ctx, key)

		t.Run("renew verify release", func(t *testing.T) {
			r, err := co.TryAcquireWriteLock(ctx, key, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if held, err := r.VerifyStillHeld(ctx); !held || err != nil {
				t.Fatalf("verify: %v %v", held, err)
			}
			if ok, err := r.Renew(ctx, 10*time.Second); !ok || err != nil {
				t.Fatalf("renew: %v %v", ok, err)
			}
			if est := r.RemainingEstimate(); est <= 5*time.Second {
				t.Fatalf("estimate %v after renewing to 10s", est)
			}
			// Removed behind its back: renew answers false and the handle is lost.
			e.admin.ZRem(ctx, key, r.OwnerToken())
			if held, err := r.VerifyStillHeld(ctx); held || err != nil {
				t.Fatalf("verify after removal: %v %v", held, err)
			}
			if ok, err := r.Renew(ctx, 10*time.Second); ok || err != nil {
				t.Fatalf("renew after removal: %v %v", ok, err)
			}
			if s := r.State(); s != prim.StateLost {
				t.Fatalf("state %v, want lost", s)
			}
			if res, err := r.Release(ctx); res != prim.AlreadyReleased || err != nil {
				t.Fatalf("release: %v %v", res, err)
			}
		})

		t.Run("expired entry is not renewed", func(t *testing.T) {
			r, err := co.TryAcquireReadLock(ctx, key, 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			// Keep the key (another owner), so the expired entry stays in the set
			// until an operation prunes it.
			other, err := co.TryAcquireReadLock(ctx, key, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release(ctx)
			time.Sleep(150 * time.Millisecond)
			// The server's clock decides: the entry is still in the set, but its
			// deadline passed, so the renewal answers false and removes it.
			if e.admin.ZScore(ctx, key, r.OwnerToken()).Err() != nil {
				t.Fatal("the expired entry is already gone; nothing tested")
			}
			if ok, err := r.Renew(ctx, 10*time.Second); ok || err != nil {
				t.Fatalf("renew after expiry: %v %v, want false", ok, err)
			}
			if s := r.State(); s != prim.StateLost {
				t.Fatalf("state %v, want lost", s)
			}
			if held, err := r.VerifyStillHeld(ctx); held || err != nil {
				t.Fatalf("verify after expiry: %v %v", held, err)
			}
			if got := e.admin.ZScore(ctx, key, r.OwnerToken()).Err(); !errors.Is(got, redis.Nil) {
				t.Fatalf("the expired entry is still there: %v", got)
			}
		})

		t.Run("cancelled verification leaves the handle", func(t *testing.T) {
			r, err := co.TryAcquireReadLock(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if held, err := r.VerifyStillHeld(cctx); held || !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled verify: %v %v", held, err)
			}
			if s := r.State(); s != prim.StateHeld {
				t.Fatalf("state %v after a cancelled verification, want held", s)
			}
			if res, err := r.Release(ctx); res != prim.Released || err != nil {
				t.Fatalf("release after a cancelled verification: %v %v", res, err)
			}
			if e.admin.Exists(ctx, key).Val() != 0 {
				t.Fatal("entry left after release")
			}
		})

		t.Run("failed renewal marks lost", func(t *testing.T) {
			r, err := co.TryAcquireReadLock(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			policy := e.admin.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]
			restore := func() {
				ctx := ctxT(t, 10*time.Second)
				if err := e.admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
					t.Errorf("restoring maxmemory: %v", err)
				}
				if policy != "" {
					e.admin.ConfigSet(ctx, "maxmemory-policy", policy)
				}
			}
			t.Cleanup(restore)
			if err := e.admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
			ok, err := r.Renew(ctx, 20*time.Second)
			if ok || err == nil || errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("renewal out of memory: %v %v, want false and the server's refusal", ok, err)
			}
			if !errors.Is(err, prim.ErrOutOfMemory) {
				t.Fatalf("renewal error %v, want ErrOutOfMemory", err)
			}
			if s := r.State(); s != prim.StateLost || r.RemainingEstimate() != 0 {
				t.Fatalf("state %v estimate %v after a failed renewal, want lost and 0", s, r.RemainingEstimate())
			}
			select {
			case <-r.Done():
			default:
				t.Fatal("Done not closed after a failed renewal")
			}
			restore()
			if ok, err := r.Renew(ctx, 20*time.Second); ok || err != nil {
				t.Fatalf("renewal of a lost handle: %v %v, want false without error", ok, err)
			}
			if p := e.admin.PTTL(ctx, key).Val(); p > 10*time.Second {
				t.Fatalf("a lost handle renewed the key: PTTL %v", p)
			}
			// Release still removes the entry.
			if res, err := r.Release(ctx); res != prim.Released || err != nil {
				t.Fatalf("release of a lost handle: %v %v", res, err)
			}
			if e.admin.Exists(ctx, key).Val() != 0 {
				t.Fatal("entry left after release")
			}
		})
	})
}

// TestRWLeaseFaults: uncertain acquisitions end released owner-checked, an
// uncertain renewal marks the handle lost, and Close ignores failures —
// faults made real on the client's own toxiproxy link.
func TestRWLeaseFaults(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, cut := defaultClient(t, e)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		co := prim.New(c, prim.WithCleanupTimeout(time.Second))
		key := e.k("{rwf}")
		// Load the scripts: with replies lost a NOSCRIPT would never come back.
		if w, err := co.TryAcquireWriteLock(ctx, key, time.Second); err == nil {
			w.Renew(ctx, time.Second)
			w.VerifyStillHeld(ctx)
			w.Release(ctx)
		} else {
			t.Fatal(err)
		}
		heal := func(t *testing.T) {
			t.Cleanup(func() {
				if err := link.Heal(); err != nil {
					t.Error(err)
				}
				e.admin.Del(ctx, key)
			})
		}
		for _, write := range []bool{false, true} {
			t.Run(fmt.Sprintf("acquisition reply lost write=%v", write), func(t *testing.T) {
				heal(t)
				before := cmdCalls(ctx, e.admin, "evalsha", "eval")
				cut.arm(link.LoseReplies)
				actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				acq := co.TryAcquireReadLock
				if write {
					acq = co.TryAcquireWriteLock
				}
				l, err := acq(actx, key, 30*time.Second)
				cancel()
				if l != nil || !errors.Is(err, prim.ErrUncertain) {
					t.Fatalf("got %v, %v; want no lease and ErrUncertain", l, err)
				}
				// The script ran: its entry exists until the owner-checked clean-up,
				// long before its 30s lease would end.
				if !eventually(2*time.Second, func() bool { return e.admin.ZCard(ctx, key).Val() == 1 }) {
					t.Fatal("the acquisition did not run")
				}
				if err := link.Heal(); err != nil {
					t.Fatal(err)
				}
				if !eventually(10*time.Second, func() bool { return e.admin.Exists(ctx, key).Val() == 0 }) {
					t.Fatal("the unreturned entry was not released (owner-checked clean-up)")
				}
				// Never replayed: one acquisition script, one release script.
				if n := cmdCalls(ctx, e.admin, "evalsha", "eval") - before; n != 2 {
					t.Fatalf("%d scripts ran, want 2 (the acquisition once and its release)", n)
				}
				w, err := co.TryAcquireWriteLock(ctx, key, 5*time.Second)
				if err != nil {
					t.Fatalf("writer after the clean-up: %v", err)
				}
				w.Release(ctx)
			})
		}

		t.Run("cancelled after the server accepted", func(t *testing.T) {
			heal(t)
			before := cmdCalls(ctx, e.admin, "evalsha", "eval")
			if err := link.Latency(200*time.Millisecond, 0); err != nil {
				t.Fatal(err)
			}
			// The script runs ~200ms after sending; the caller gives up at 100ms.
			actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			l, err := co.TryAcquireReadLock(actx, key, 30*time.Second)
			cancel()
			if l != nil || !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("got %v, %v; want no lease and ErrUncertain", l, err)
			}
			if !eventually(5*time.Second, func() bool { return e.admin.ZCard(ctx, key).Val() == 1 }) {
				t.Fatal("the acquisition did not run")
			}
			// Its accepted reply comes back late: the entry is released
			// owner-checked, long before its 30s lease would end.
			if !eventually(10*time.Second, func() bool { return e.admin.Exists(ctx, key).Val() == 0 }) {
				t.Fatal("the accepted, unreturned entry was not released")
			}
			if n := cmdCalls(ctx, e.admin, "evalsha", "eval") - before; n != 2 {
				t.Fatalf("%d scripts ran, want 2 (the acquisition once and its release)", n)
			}
		})

		t.Run("reply after the local estimate", func(t *testing.T) {
			heal(t)
			before := cmdCalls(ctx, e.admin, "evalsha", "eval")
			if err := link.Latency(200*time.Millisecond, 0); err != nil {
				t.Fatal(err)
			}
			// No deadline: the reply comes, but after the 150ms lease's estimate.
			l, err := co.TryAcquireWriteLock(context.Background(), key, 150*time.Millisecond)
			if l != nil || !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("got %v, %v; want no lease and ErrUncertain", l, err)
			}
			// Its entry is released owner-checked: a second script, never a resend.
			if !eventually(10*time.Second, func() bool { return cmdCalls(ctx, e.admin, "evalsha", "eval")-before >= 2 }) {
				t.Fatal("no owner-checked release after the late reply")
			}
			time.Sleep(200 * time.Millisecond)
			if n := cmdCalls(ctx, e.admin, "evalsha", "eval") - before; n != 2 {
				t.Fatalf("%d scripts ran, want 2 (the acquisition once and its release)", n)
			}
		})

		t.Run("clean-up leaves other owners", func(t *testing.T) {
			heal(t)
			other, err := co.TryAcquireReadLock(ctx, key, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			cut.arm(link.LoseReplies)
			actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = co.TryAcquireReadLock(actx, key, 30*time.Second)
			cancel()
			if !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("%v, want ErrUncertain", err)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
			if !eventually(10*time.Second, func() bool { return e.admin.ZCard(ctx, key).Val() == 1 }) {
				t.Fatalf("owners %d after the clean-up, want the other reader alone", e.admin.ZCard(ctx, key).Val())
			}
			if held, err := other.VerifyStillHeld(ctx); !held || err != nil {
				t.Fatalf("the other reader: %v %v", held, err)
			}
			other.Release(ctx)
		})

		t.Run("uncertain renewal marks lost", func(t *testing.T) {
			heal(t)
			r, err := co.TryAcquireReadLock(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := r.Renew(ctx, 10*time.Second); !ok || err != nil {
				t.Fatalf("warm-up renewal: %v %v", ok, err)
			}
			cut.arm(link.Partition)
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			ok, err := r.Renew(rctx, 10*time.Second)
			cancel()
			if ok || !errors.Is(err, prim.ErrUncertain) {
				t.Fatalf("black-holed renewal: %v %v, want false and ErrUncertain", ok, err)
			}
			if s := r.State(); s != prim.StateLost && s != prim.StateReleased {
				t.Fatalf("state %v after an uncertain renewal, want lost", s)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
			if ok, err := r.Renew(ctx, 10*time.Second); ok {
				t.Fatalf("renewal after an uncertain one succeeded (%v)", err)
			}
			// Fenced and released in the background once the link is back.
			if !eventually(10*time.Second, func() bool { return e.admin.Exists(ctx, key).Val() == 0 }) {
				t.Fatal("the entry of the uncertain renewal was not cleaned up")
			}
		})

		t.Run("Close ignores failures", func(t *testing.T) {
			heal(t)
			w, err := co.TryAcquireWriteLock(ctx, key, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := link.Partition(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := w.Close(); err != nil {
				t.Fatalf("Close: %v, want nil whatever happened", err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("Close took %v with a clean-up timeout of 1s", el)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			// The entry it could not remove blocks writers until it expires.
			if e.admin.ZCard(ctx, key).Val() != 1 {
				t.Fatal("the entry is gone though Close could not reach the server")
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
			if !eventually(10*time.Second, func() bool { return e.admin.Exists(ctx, key).Val() == 0 }) {
				t.Fatal("the entry did not expire")
			}
		})
	})
}

// TestRWLeaseBadInputs: every bad input is a typed error and nothing is sent
// or written.
func TestRWLeaseBadInputs(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 30*time.Second)
		c, cnt := e.client(t)
		co := prim.New(c)
		key := e.k("{rwbad}")
		for _, tc := range []struct {
			name string
			key  string
			ttl  time.Duration
			want error
		}{
			{"empty key", "", time.Second, prim.ErrEmptyKey},
			{"zero ttl", key, 0, prim.ErrInvalidTTL},
			{"negative ttl", key, -time.Second, prim.ErrInvalidTTL},
			{"sub-millisecond ttl", key, 500 * time.Microsecond, prim.ErrInvalidTTL},
			{"fractional ms ttl", key, 1500 * time.Microsecond, prim.ErrInvalidTTL},
		} {
			for _, write := range []bool{false, true} {
				acq := co.TryAcquireReadLock
				if write {
					acq = co.TryAcquireWriteLock
				}
				size := e.admin.DBSize(ctx).Val()
				before := cnt.get()
				l, err := acq(ctx, tc.key, tc.ttl)
				if l != nil || !errors.Is(err, tc.want) || !errors.Is(err, prim.ErrInvalidArgument) {
					t.Errorf("%s write=%v: %v %v, want %v", tc.name, write, l, err, tc.want)
				}
				if cnt.get() != before {
					t.Errorf("%s write=%v: %d commands sent", tc.name, write, cnt.get()-before)
				}
				if after := e.admin.DBSize(ctx).Val(); after > size || e.admin.Exists(ctx, key).Val() != 0 {
					t.Errorf("%s write=%v: DBSIZE %d -> %d", tc.name, write, size, after)
				}
			}
		}
	})
}

// TestRWLeaseCluster: the one-key scripts on Cluster, default options.
func TestRWLeaseCluster(t *testing.T) {
	forEachCluster(t, func(t *testing.T, ctx context.Context, c redis.UniversalClient) {
		co := prim.New(c).WithPrefix("app:")
		for _, key := range []string{"{acct:1}:rw", "acct:2:rw", "x"} {
			r1, err := co.TryAcquireReadLock(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			r2, err := co.TryAcquireReadLock(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if _, err := co.TryAcquireWriteLock(ctx, key, 10*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("%s: writer beside readers: %v", key, err)
			}
			if ok, err := r1.Renew(ctx, 20*time.Second); !ok || err != nil {
				t.Fatalf("%s: renew %v %v", key, ok, err)
			}
			if held, err := r2.VerifyStillHeld(ctx); !held || err != nil {
				t.Fatalf("%s: verify %v %v", key, held, err)
			}
			r1.Release(ctx)
			r2.Release(ctx)
			w, err := co.TryAcquireWriteLock(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatalf("%s: writer after readers left: %v", key, err)
			}
			if w.Key() != "app:"+key {
				t.Fatalf("key %q", w.Key())
			}
			if res, err := w.Release(ctx); res != prim.Released || err != nil {
				t.Fatalf("%s: release %v %v", key, res, err)
			}
		}
	})
}

// TestRWLeaseConcurrentExclusion: 12 reader and 4 writer goroutines on two
// Coordinators take leases of one key for a bounded number of rounds; while a
// writer holds its lease no other owner holds one (counted locally, and the
// set sampled on the server). Readers pause between leases, so writers (who
// retry a bounded number of times) find gaps: with readers back to back,
// writers starve, as documented.
func TestRWLeaseConcurrentExclusion(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		key := e.k("{rwx}")
		e.admin.Del(ctx, key)
		var cos []*prim.Coordinator
		for range 2 {
			c, _ := defaultClient(t, e)
			cos = append(cos, prim.New(c))
		}
		var mu sync.Mutex
		readers, writers, reads, writes := 0, 0, 0, 0
		var wg sync.WaitGroup
		errc := make(chan error, 16)
		for g := range 16 {
			write := g < 4
			wg.Add(1)
			go func() {
				defer wg.Done()
				co := cos[g%2]
				acq := co.TryAcquireReadLock
				if write {
					acq = co.TryAcquireWriteLock
				}
				for range 30 {
					var l *prim.RWLease
					for attempt := 0; l == nil && attempt < 100; attempt++ {
						var err error
						l, err = acq(ctx, key, 10*time.Second)
						if errors.Is(err, prim.ErrNotAcquired) {
							time.Sleep(time.Millisecond)
							continue
						}
						if err != nil {
							errc <- err
							return
						}
					}
					if l == nil {
						continue
					}
					mu.Lock()
					if write {
						writers++
						writes++
					} else {
						readers++
						reads++
					}
					bad := writers > 1 || (writers == 1 && readers > 0)
					mu.Unlock()
					if bad {
						errc <- fmt.Errorf("a writer overlaps another owner")
						return
					}
					if write {
						if n := e.admin.ZCard(ctx, key).Val(); n != 1 {
							errc <- fmt.Errorf("%d owners on the server while a writer holds", n)
							return
						}
					}
					time.Sleep(time.Millisecond)
					mu.Lock()
					if write {
						writers--
					} else {
						readers--
					}
					mu.Unlock()
					if res, err := l.Release(ctx); res != prim.Released || err != nil {
						errc <- fmt.Errorf("release: %v %v", res, err)
						return
					}
					if !write {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		if reads == 0 || writes == 0 {
			t.Fatalf("%d reads and %d writes granted: the test exercised nothing", reads, writes)
		}
		t.Logf("%d read and %d write leases granted", reads, writes)
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatal("entries left after every owner released")
		}
	})
}
