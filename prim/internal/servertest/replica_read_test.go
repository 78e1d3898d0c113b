package servertest_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// A Cluster client that reads from replicas (ReadOnly) must not let a lagging
// replica decide a release. Another owner's lease is replicated, the replica
// stops applying its primary's stream (CLIENT PAUSE WRITE on it, which holds
// the replication link's input and lets reads go on: deterministic, where a
// cut link races the stream already sent), the other owner releases on the
// primary:
// DELEX on the primary removes nothing, and the answer is the release
// script's on the primary, AlreadyReleased — not NotOwned, which a GET routed
// to the replica (still holding the other owner's value) would have given.
// Only builds with DELEX ever sent that GET; the scripts run on the primary.
func TestReleaseMissIgnoresLaggingReplica(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			if h, ok := buildHas[b]; ok && !h.delex {
				t.Skip("the build has no DELEX: a release is the script, on the primary")
			}
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
			lease, fence := "{rr}:lease", "{rr}:fence"
			primary, err := topo.ClusterNodeFor(ctx, prim.Slot(lease))
			if err != nil {
				t.Fatal(err)
			}
			replica := replicaOfKey(t, ctx, topo, lease)

			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			primary.Admin().Del(ctx, lease) // our lease gone (as by expiry)
			l2, err := co2.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			theirs := primary.Admin().Get(ctx, lease).Val()
			// The replica has the other owner's value (read on it directly).
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
			eventually("the replica never had the other owner's value", func() bool {
				return rc.Get(ctx, lease).Val() == theirs
			})
			// The replica stops applying its primary's stream (CLIENT PAUSE
			// WRITE pauses the replication link's input too; reads go on): a
			// replica lagging as behind a cut replication link.
			if err := replica.Admin().Do(ctx, "CLIENT", "PAUSE", 30000, "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			defer replica.Admin().Do(ctx, "CLIENT", "UNPAUSE")
			if r, err := l2.Release(ctx); r != prim.Released || err != nil {
				t.Fatalf("the other owner's release: %v %v", r, err)
			}
			if v := rc.Get(ctx, lease).Val(); v != theirs {
				t.Fatalf("the replica no longer lags (reads %q): the test shows nothing", v)
			}
			// c's reads of the key go to the lagging replica (a slot map
			// loaded before the replica was listed sends them to the primary
			// until reloaded).
			cc := c.(*redis.ClusterClient)
			eventually("the ReadOnly client's reads never reached the replica", func() bool {
				if c.Get(ctx, lease).Val() == theirs {
					return true
				}
				cc.ReloadState(ctx)
				return false
			})
			if r, err := l.Release(ctx); r != prim.AlreadyReleased || err != nil {
				t.Fatalf("release with a lagging replica: %v %v, want AlreadyReleased (the lease is gone on the primary)", r, err)
			}
		})
	}
}
