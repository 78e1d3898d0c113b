package servertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestWaitingClusterFailover waits on a lock whose slot fails over to its replica
// mid-wait; the waiter still acquires after the holder releases on the new
// primary.
func TestWaitingClusterFailover(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			topo := testbed.Cluster(t, b, 3, 1)
			c, err := topo.Client()
			if err != nil {
				t.Fatal(err)
			}
			co := prim.New(c)
			defer co.Close()
			lease, fence := "{cf}:lease", "{cf}:fence"
			replica := replicaOfKey(t, ctx, topo, lease)
			holder, err := co.TryAcquireFencedLock(ctx, lease, fence, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := co.AcquireFencedLock(ctx, lease, fence, 10*time.Second)
				if err == nil {
					if l.FencingToken() <= holder.FencingToken() {
						t.Errorf("waiter token %d after %d", l.FencingToken(), holder.FencingToken())
					}
					l.Release(ctx)
				}
				got <- err
			}()
			time.Sleep(300 * time.Millisecond)
			if err := topo.ClusterFailover(ctx, replica.Name, ""); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			deadline := time.Now().Add(10 * time.Second)
			for {
				r, err := holder.Release(ctx)
				if err == nil && r == prim.Released {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("holder could not release on the new primary: %v %v", r, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("waiter acquired %v after the release on the new primary", time.Since(released))
			case <-time.After(15 * time.Second):
				t.Fatal("waiter did not complete after the slot failed over")
			}
		})
	}
}

// replicaOfKey returns the replica of the primary that serves key.
func replicaOfKey(t *testing.T, ctx context.Context, topo *testbed.Topology, key string) *testbed.Node {
	t.Helper()
	owner, err := topo.ClusterNodeFor(ctx, prim.Slot(key))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range topo.Nodes() {
		if r, _ := n.Admin().Do(ctx, "ROLE").Slice(); len(r) > 3 && r[0] == "slave" && fmt.Sprint(r[2]) == mustPort(owner.Addr) {
			return n
		}
	}
	t.Fatalf("no replica of %s", owner.Name)
	return nil
}

func mustPort(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}
