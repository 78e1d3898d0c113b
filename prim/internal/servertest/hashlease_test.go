package servertest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// hasFieldExpiry reports whether the server has HPEXPIRE (Redis 7.4+, Valkey 9+),
// asked of the server itself rather than inferred from a build name.
func hasFieldExpiry(ctx context.Context, a *redis.Client) bool {
	err := a.Do(ctx, "HPTTL", "hfe-probe", "FIELDS", 1, "f").Err()
	return err == nil || !strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

func TestHashLeases(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		h := e.k("leases")
		e.admin.HSet(ctx, h, "unrelated", "x")
		hfe := hasFieldExpiry(ctx, e.admin)
		// The matrix is known: the probe must agree with it, so a broken probe
		// cannot send every build down the "unsupported" path.
		if want, known := map[string]bool{"redis-7.0": false, "valkey-8.1": false, "redis-8.0": true, "redis-8.6": true, "valkey-9.1": true}[e.topo.Build.Name]; known && hfe != want {
			t.Fatalf("%s: hash-field expiry probe says %v", e.topo.Build.Name, hfe)
		}
		if !hfe {
			before := snapshot(ctx, e.admin, h)
			_, err := co.TryAcquireLease(ctx, h, "worker:1", time.Second)
			if !errors.Is(err, prim.ErrFeatureUnsupported) || !strings.Contains(err.Error(), "Redis 7.4") {
				t.Fatalf("old server: %v, want ErrFeatureUnsupported naming the versions", err)
			}
			if _, err := co.AcquireLease(ctx, h, "worker:1", time.Second); !errors.Is(err, prim.ErrFeatureUnsupported) {
				t.Fatalf("old server, waiting: %v", err)
			}
			if after := snapshot(ctx, e.admin, h); after != before {
				t.Fatalf("a refused lease changed the hash:\n%s\n%s", before, after)
			}
			return
		}
		t.Run("fields are independent", func(t *testing.T) {
			a, err := co.TryAcquireLease(ctx, h, "a", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			b, err := co.TryAcquireLease(ctx, h, "b", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := co.TryAcquireLease(ctx, h, "a", 10*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("second owner of field a: %v", err)
			}
			if r, err := a.Release(ctx); r != prim.Released || err != nil {
				t.Fatal(r, err)
			}
			if held, err := b.VerifyStillHeld(ctx); !held || err != nil {
				t.Fatalf("releasing a touched b: %v %v", held, err)
			}
			if e.admin.HGet(ctx, h, "unrelated").Val() != "x" {
				t.Fatal("an unrelated field changed")
			}
			if ok, err := b.Renew(ctx, 20*time.Second); !ok || err != nil {
				t.Fatalf("renew b: %v %v", ok, err)
			}
			ms := e.admin.Do(ctx, "HPTTL", h, "FIELDS", 1, "b").Val().([]any)[0].(int64)
			if ms < 15000 {
				t.Fatalf("b's field PTTL %dms after renewing to 20s", ms)
			}
			b.Close()
		})
		t.Run("an expired owner cannot touch the replacement", func(t *testing.T) {
			old, err := co.TryAcquireLease(ctx, h, "w", 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(80 * time.Millisecond)
			cur, err := co.TryAcquireLease(ctx, h, "w", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if ok, _ := old.Renew(ctx, 10*time.Second); ok {
				t.Fatal("the expired owner renewed the replacement's field")
			}
			if r, _ := old.Release(ctx); r != prim.NotOwned && r != prim.AlreadyReleased {
				t.Fatalf("expired owner's release: %v", r)
			}
			old.Close()
			if held, _ := cur.VerifyStillHeld(ctx); !held {
				t.Fatal("the expired owner removed the replacement")
			}
			cur.Close()
		})
		t.Run("hash with key-level expiry refused untouched", func(t *testing.T) {
			hx := e.k("expiring")
			e.admin.HSet(ctx, hx, "other", "1")
			e.admin.PExpire(ctx, hx, time.Hour)
			before := snapshot(ctx, e.admin, hx)
			if _, err := co.TryAcquireLease(ctx, hx, "w", time.Second); !errors.Is(err, prim.ErrHashKeyExpiring) {
				t.Fatalf("got %v, want ErrHashKeyExpiring", err)
			}
			if after := snapshot(ctx, e.admin, hx); after != before {
				t.Fatalf("refused acquisition changed the hash:\n%s\n%s", before, after)
			}
			e.admin.Set(ctx, e.k("str"), "v", 0)
			if _, err := co.TryAcquireLease(ctx, e.k("str"), "w", time.Second); !errors.Is(err, prim.ErrWrongType) {
				t.Fatalf("string key: %v, want ErrWrongType", err)
			}
			if _, err := co.TryAcquireLease(ctx, "", "f", time.Second); !errors.Is(err, prim.ErrEmptyKey) || errors.Is(err, prim.ErrEmptyField) {
				t.Fatalf("empty hash key: %v, want ErrEmptyKey", err)
			}
			// An empty field is an empty field, not an empty key, and writes nothing.
			before = snapshot(ctx, e.admin, h)
			for name, acquire := range map[string]func() error{
				"TryAcquireLease": func() error { _, err := co.TryAcquireLease(ctx, h, "", time.Second); return err },
				"AcquireLease":    func() error { _, err := co.AcquireLease(ctx, h, "", time.Second); return err },
			} {
				err := acquire()
				if !errors.Is(err, prim.ErrEmptyField) || !errors.Is(err, prim.ErrInvalidArgument) ||
					errors.Is(err, prim.ErrEmptyKey) || !strings.Contains(err.Error(), "empty field") {
					t.Fatalf("%s with an empty field: %v; want ErrEmptyField (an invalid argument) saying \"empty field\"", name, err)
				}
			}
			if after := snapshot(ctx, e.admin, h); after != before {
				t.Fatalf("an empty field changed the hash:\n%s\n%s", before, after)
			}
			if _, err := co.TryAcquireLease(ctx, h, "f", 0); !errors.Is(err, prim.ErrInvalidTTL) {
				t.Fatalf("zero ttl: %v", err)
			}
		})
		t.Run("waiting: hand-off and field expiry", func(t *testing.T) {
			holder, err := co.TryAcquireLease(ctx, h, "q", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := co.AcquireLease(ctx, h, "q", 10*time.Second)
				if err == nil {
					l.Close()
				}
				got <- err
			}()
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			holder.Release(ctx)
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			// A waiter that missed the release's invalidation would wait
			// for the holder's 10s: noticeable keeps clear of that and of a
			// loaded machine.
			if el := time.Since(start); el > noticeable {
				t.Fatalf("lease hand-off took %v", el)
			}
			// A holder that vanishes: the waiter wakes at the field's deadline.
			const ttl = 500 * time.Millisecond
			start = time.Now()
			if _, err := co.TryAcquireLease(ctx, h, "z", ttl); err != nil {
				t.Fatal(err)
			}
			l, err := co.AcquireLease(ctx, h, "z", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// Not before the field ran out; soon after it. 1.5s past it
			// keeps clear of a loaded machine (it was 100ms, a quiet
			// one's), as in TestWaitingExpiryWithoutRelease. Active expiry
			// is on here, so the server's removal of the field may wake
			// the waiter too: this bound says the wait ends soon, not why.
			if el := time.Since(start); el < ttl-20*time.Millisecond || el > ttl+1500*time.Millisecond {
				t.Fatalf("waiter acquired after %v for a %v field", el, ttl)
			}
			l.Close()
		})
	})
}
