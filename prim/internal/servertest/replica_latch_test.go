package servertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// Reads that decide go to the primary (issue 31, item 2): a latch read
// through a Cluster client that reads from replicas (ReadOnly) must not let a
// lagging replica answer. The replica of the latch's slot stops applying its
// primary's stream (CLIENT PAUSE WRITE on it, as in
// TestReleaseMissIgnoresLaggingReplica), then the latch is reset and a new one
// created on the primary: Join returns the current generation, Count reads
// its count (not -1), Join finds the new latch (not ErrNotFound), and Wait of
// the current generation returns true once it reaches zero. A permit, a read
// lease and a fenced lock removed on the primary (as by expiry) but still on
// the lagging replica verify false (their verifications are scripts, which
// no read routing sends to a replica: a guard, not a fix).
func TestLatchReadsIgnoreLaggingReplica(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			topo := testbed.Cluster(t, b, 3, 1)
			c, err := topo.Client(testbed.WithOptions(func(o *redis.UniversalOptions) { o.ReadOnly = true }))
			if err != nil {
				t.Fatal(err)
			}
			other, err := topo.Client()
			if err != nil {
				t.Fatal(err)
			}
			co, co2 := prim.New(c), prim.New(other)
			defer co.Close()
			defer co2.Close()
			key, fresh := "{rl}:latch", "{rl}:new"
			replica := replicaOfKey(t, ctx, topo, key)
			old, err := co2.CreateCountdownLatch(ctx, key, 2)
			if err != nil {
				t.Fatal(err)
			}
			// Handles whose verification must read the primary too: a
			// permit, a read lease and a fenced lock, taken through the
			// ReadOnly client, their keys on the same slot.
			permit, err := co.Semaphore("{rl}:sem", 2).TryAcquire(ctx, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			reader, err := co.TryAcquireReadLock(ctx, "{rl}:rw", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			lock, err := co.TryAcquireFencedLock(ctx, "{rl}:lease", "{rl}:fence", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			primary, err := topo.ClusterNodeFor(ctx, prim.Slot(key))
			if err != nil {
				t.Fatal(err)
			}
			rc := replica.Admin().Conn()
			defer rc.Close()
			if err := rc.ReadOnly(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			eventually := func(what string, ok func() bool) {
				t.Helper()
				for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal(what)
					}
				}
			}
			eventually("the replica never had the first generation and the three leases", func() bool {
				return rc.HGet(ctx, key, "gen").Val() == old.Generation() && rc.Exists(ctx, "{rl}:sem", "{rl}:rw", "{rl}:lease").Val() == 3
			})
			if err := replica.Admin().Do(ctx, "CLIENT", "PAUSE", 30000, "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			defer replica.Admin().Do(ctx, "CLIENT", "UNPAUSE")
			cur, err := co2.ResetCountdownLatch(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := co2.CreateCountdownLatch(ctx, fresh, 1); err != nil {
				t.Fatal(err)
			}
			// The three leases gone on the primary (as by expiry); the
			// lagging replica still has them.
			if err := primary.Admin().Del(ctx, "{rl}:sem", "{rl}:rw", "{rl}:lease").Err(); err != nil {
				t.Fatal(err)
			}
			if g := rc.HGet(ctx, key, "gen").Val(); g != old.Generation() {
				t.Fatalf("the replica no longer lags (reads generation %q): the test shows nothing", g)
			}
			// c's reads of the key go to the lagging replica.
			cc := c.(*redis.ClusterClient)
			eventually("the ReadOnly client's reads never reached the replica", func() bool {
				if c.HGet(ctx, key, "gen").Val() == old.Generation() {
					return true
				}
				cc.ReloadState(ctx)
				return false
			})

			j, err := co.JoinCountdownLatch(ctx, key)
			if err != nil || j.Generation() != cur.Generation() {
				t.Fatalf("Join with a lagging replica: %v %v, want the current generation", j, err)
			}
			if n, err := j.Count(ctx); n != 1 || err != nil {
				t.Fatalf("Count of the current generation with a lagging replica: %d %v, want 1", n, err)
			}
			if _, err := co.JoinCountdownLatch(ctx, fresh); err != nil {
				t.Fatalf("Join of a latch just created, with a lagging replica: %v", err)
			}
			for _, v := range []struct {
				name   string
				verify func(context.Context) (bool, error)
			}{{"permit", permit.VerifyStillHeld}, {"read lease", reader.VerifyStillHeld}, {"fenced lock", lock.VerifyStillHeld}} {
				if held, err := v.verify(ctx); held || err != nil {
					t.Fatalf("%s VerifyStillHeld with the lease gone on the primary and a lagging replica: %v %v, want false", v.name, held, err)
				}
			}
			if n, err := old.Count(ctx); n != -1 || err != nil {
				t.Fatalf("Count of the replaced generation: %d %v, want -1", n, err)
			}
			if n, err := cur.CountDown(ctx); n != 0 || err != nil {
				t.Fatalf("count down: %d %v", n, err)
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			ok, err := j.Wait(wctx)
			if !ok || err != nil {
				t.Fatalf("Wait of the current generation, complete on the primary, with a lagging replica: %v %v, want true", ok, err)
			}
		})
	}
}
