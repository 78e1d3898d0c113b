package servertest_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// After a CLUSTER FAILOVER the dedicated-connection paths (hash-lease
// acquisition, fenced renewal) reach the new slot owner: the old owner answers
// MOVED, prim follows it and the cluster client reloads its slot map, so the
// first attempts after the failover succeed and none is ErrRedirected later.
// (The landed acquisition kept its resolved node: MOVED on every attempt for
// the rest of the run, hash-lease/failover-cluster seed 2.) The client has
// go-redis's default options but one: it skips the maintenance-notifications
// handshake. go-redis v9.23 (the newest) races on its own options when a node
// refuses it: the slot-map reload the failover starts sets up pooled
// connections that write the node client's Options under one lock while
// prim's first dedicated connection (Conn(), which shares them under another)
// reads them, and CI's -race run reported it here. What this test checks is
// prim's routing, which the handshake does not touch; the default handshake
// is exercised by every other cluster test (TestDedicatedFirstUseConcurrent
// among them).
func TestDedicatedPathsFollowFailover(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			topo := testbed.Cluster(t, b, 3, 1)
			c, err := topo.Client(testbed.WithOptions(func(o *redis.UniversalOptions) {
				o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
			}))
			if err != nil {
				t.Fatal(err)
			}
			co := prim.New(c)
			defer co.Close()
			lease, fence, hk := "{df}:lease", "{df}:fence", "{df}:hash"
			replica := replicaOfKey(t, ctx, topo, lease)
			hfe := true
			// Both paths used once before the failover: the client knows the old owner.
			if l, err := co.TryAcquireLease(ctx, hk, "warm", 30*time.Second); errors.Is(err, prim.ErrFeatureUnsupported) {
				hfe = false
			} else if err != nil {
				t.Fatal(err)
			} else {
				l.Release(ctx)
			}
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := l.Renew(ctx, 30*time.Second); !ok || err != nil {
				t.Fatalf("renewal before the failover: %v %v", ok, err)
			}
			if err := topo.ClusterFailover(ctx, replica.Name, ""); err != nil {
				t.Fatal(err)
			}
			failedOver := time.Now()
			// recovered retries op until it succeeds, for at most a second.
			recovered := func(what string, op func() error) {
				t.Helper()
				var err error
				for attempts := 1; ; attempts++ {
					if err = op(); err == nil {
						t.Logf("%s: recovered %v after the failover (%d attempt(s))", what, time.Since(failedOver).Round(time.Millisecond), attempts)
						return
					}
					if time.Since(failedOver) > time.Second {
						t.Fatalf("%s: not recovered within a second of the failover: %v", what, err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			recovered("fenced renewal", func() error {
				ok, err := l.Renew(ctx, 30*time.Second)
				if err == nil && !ok {
					err = fmt.Errorf("not renewed (state %v)", l.State())
				}
				return err
			})
			if !hfe {
				return
			}
			recovered("hash-lease acquisition", func() error {
				hl, err := co.TryAcquireLease(ctx, hk, "after", 5*time.Second)
				if err == nil {
					hl.Release(ctx)
				}
				return err
			})
			for i := range 20 {
				hl, err := co.TryAcquireLease(ctx, hk, fmt.Sprint("f", i), 5*time.Second)
				if err != nil {
					t.Fatalf("acquisition %d after recovery: %v", i, err)
				}
				if ok, err := hl.Renew(ctx, 5*time.Second); !ok || err != nil {
					t.Fatalf("hash-lease renewal %d after recovery: %v %v", i, ok, err)
				}
				hl.Release(ctx)
			}
		})
	}
}
