package scenarios

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestLeakScanCatchesAnRWLeak: prim's read-write keys expire at their
// latest owner deadline, so no run of prim leaves one behind; the leak step
// of the rwlock family is shown on a real server holding a hand-made leak
// (a read-write key whose owners have no expiry) beside what is not one (a
// key that expired, still in memory with active expiry off): the scan lists
// each owner of the leaked key, the leaks checker FAILs on them, and PASSes
// once they are gone. A read or write acquisition makes the scan apply
// (leakScanNA), where before only exclusive ones did.
func TestLeakScanCatchesAnRWLeak(t *testing.T) {
	b := testbed.DefaultBuild
	if m := testbed.Matrix(); len(m) == 1 {
		b = m[0]
	}
	topo := testbed.Standalone(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := topo.Node("n1").Admin()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(activeExpiryOff(ctx, &Env{Topo: topo}))
	s, ok := registry["rwlock/baseline"]
	if !ok {
		t.Fatal("rwlock/baseline is not registered")
	}
	scan := func() models.Result {
		t.Helper()
		env := &Env{Topo: topo, Rec: history.NewRecorder(time.Now())}
		// One read lease of 100ms, acquired and never released: nothing of
		// it may remain 100ms (+ drift) after its acquisition returned.
		env.Rec.Invoke(0, history.Op{F: history.FAcquireRead, Key: rwKeyPrefix + ":0", TTLMs: 100})
		env.Rec.OK(0, history.Op{Owner: "r:A", TTLMs: 100})
		if na := s.leakScanNA(env, env.Rec.History()); na != "" {
			t.Fatalf("the leak scan does not apply after a read lease: %s", na)
		}
		time.Sleep(250 * time.Millisecond)
		env.scanLeaks(ctx, 1, s.leakKey(), nil)
		r := models.CheckLeaks(env.Rec.History(), models.Options{Drift: 20 * time.Millisecond})
		t.Logf("%s", r.String())
		return r
	}
	expired := rwKeyPrefix + ":1"
	must(a.ZAdd(ctx, expired, redis.Z{Score: 1, Member: "r:gone"}).Err())
	must(a.PExpire(ctx, expired, 50*time.Millisecond).Err()) // expired, still in memory
	leaked := rwKeyPrefix + ":0"
	must(a.ZAdd(ctx, leaked, redis.Z{Score: 1, Member: "r:A"}, redis.Z{Score: 2, Member: "w:B"}).Err()) // no TTL
	r := scan()
	if r.Verdict != models.Fail || !strings.Contains(r.Summary, "2 entries:") || !strings.Contains(r.Summary, leaked+" r:A") ||
		!strings.Contains(r.Summary, leaked+" w:B") || strings.Contains(r.Summary, "r:gone") {
		t.Fatalf("the read-write key without expiry is not reported as the leak, owner by owner: %s", r.String())
	}
	must(a.Del(ctx, leaked).Err())
	if r := scan(); r.Verdict != models.Pass {
		t.Fatalf("no leak left, but %s", r.String())
	}
}
