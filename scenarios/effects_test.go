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
// primary and the old one handed out tokens past the new one's counter: a
// promotion the old primary took nothing after, a write of another key
// (its replication offset moves, the counter does not: an expiring lease
// does the same), or an old primary already demoted, proves nothing.
func TestTwoPrimariesProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := testbed.Replicated(t, testBuild(), 1, 0)
	n1, n2 := topo.Node("n1"), topo.Node("n2")
	e := &Env{Topo: topo, Impl: &primImpl{}}
	counter := e.counterKey()
	if err := n1.Admin().Set(ctx, counter, 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := topo.WaitInSync(ctx, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	probe := func(write string) []string {
		e.effects = nil
		w := watchOffset(ctx, e, n1)
		switch write {
		case "counter":
			if err := n1.Admin().Incr(ctx, counter).Err(); err != nil {
				t.Fatal(err)
			}
		case "other":
			if err := n1.Admin().Set(ctx, "diverged", "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		twoPrimaries(ctx, e, w, n1, n2, 300*time.Millisecond)
		var out []string
		for _, ef := range e.effects {
			if !ef.ongoing || ef.deposed != n1 {
				t.Fatalf("two primaries recorded as %+v, want ongoing until n1 is demoted", ef)
			}
			out = append(out, ef.what)
		}
		return out
	}

	// n2 promoted in sync, n1 takes nothing after: two primaries, no divergence.
	if err := n2.Admin().Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if got := probe(""); len(got) != 0 {
		t.Fatalf("effect recorded without a diverged write: %q", got)
	}
	// n1 takes a write of another key: its offset passes n2's, no token lost.
	if got := probe("other"); len(got) != 0 {
		t.Fatalf("effect recorded for a write that lost no token: %q", got)
	}
	// n1 hands out a token n2 never sees: split brain.
	if got := probe("counter"); len(got) != 1 {
		t.Fatalf("no effect recorded for a token handed out by the old primary after the promotion: %q", got)
	} else {
		t.Logf("effect: %s", got[0])
	}
	// Without a fencing counter (an unfenced implementation) the offsets
	// decide: the write of another key is the proof.
	e.Impl = redislockImpl{}
	if got := probe("other"); len(got) != 1 {
		t.Fatalf("no effect from the offsets without a counter: %q", got)
	}
	// n1 demoted: one primary, whatever n1 reached before.
	e.Impl = &primImpl{}
	host, port, _ := net.SplitHostPort(n2.Addr)
	if err := n1.Admin().Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	if got := probe(""); len(got) != 0 {
		t.Fatalf("effect recorded with the old primary demoted: %q", got)
	}
}
