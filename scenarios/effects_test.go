package scenarios

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

func testBuild() string {
	if m := testbed.Matrix(); len(m) == 1 {
		return m[0]
	}
	return testbed.DefaultBuild
}

// The split-brain probe records its effect only when both nodes answer as
// primary and the old one took writes past the new one's takeover point: a
// promotion the old primary took nothing after, or an old primary already
// demoted, proves nothing.
func TestTwoPrimariesProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := testbed.Replicated(t, testBuild(), 1, 0)
	n1, n2 := topo.Node("n1"), topo.Node("n2")
	if err := n1.Admin().Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := topo.WaitInSync(ctx, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	probe := func(write bool) []string {
		e := &Env{Topo: topo}
		w := watchOffset(ctx, n1)
		if write {
			if err := n1.Admin().Set(ctx, "diverged", "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		twoPrimaries(ctx, e, w, n1, n2, 300*time.Millisecond)
		return e.effect
	}

	// n2 promoted in sync, n1 takes nothing after: two primaries, no divergence.
	if err := n2.Admin().Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if got := probe(false); len(got) != 0 {
		t.Fatalf("effect recorded without a diverged write: %q", got)
	}
	// n1 takes a write n2 never sees: split brain.
	if got := probe(true); len(got) != 1 {
		t.Fatalf("no effect recorded for a write to the old primary after the promotion: %q", got)
	} else {
		t.Logf("effect: %s", got[0])
	}
	// n1 demoted: one primary, whatever n1 reached before.
	host, port, _ := net.SplitHostPort(n2.Addr)
	if err := n1.Admin().Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	if got := probe(false); len(got) != 0 {
		t.Fatalf("effect recorded with the old primary demoted: %q", got)
	}
}
