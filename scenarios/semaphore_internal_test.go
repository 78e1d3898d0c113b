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

// TestLeakScanSemaphore: prim's permits end with their deadline, so no
// mutant of it leaves one past every TTL; the semaphore's leak step is shown
// on a real server holding a hand-made semaphore instead: beside the leak (a
// permit whose deadline is a minute away, after a run whose TTLs are 100ms)
// it holds what is no leak (the capacity member, an expired permit not yet
// pruned, a permit without expiry, which only a release ends). The scan
// finds exactly the leak and the leaks checker FAILs on it, and PASSes once
// it is gone, the permit without expiry still there.
func TestLeakScanSemaphore(t *testing.T) {
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
	scan := func() models.Result {
		t.Helper()
		env := &Env{Topo: topo, Rec: history.NewRecorder(time.Now())}
		// One permit of 100ms, acquired and never released.
		env.Rec.Invoke(0, history.Op{F: history.FSemAcquire, Key: semKey, TTLMs: 100, Capacity: 3, N: 1})
		env.Rec.OK(0, history.Op{Owner: "P:a", TTLMs: 100})
		time.Sleep(250 * time.Millisecond)
		env.scanLeaks(ctx, 1, semKey)
		r := models.CheckLeaks(env.Rec.History(), models.Options{Drift: 20 * time.Millisecond})
		t.Logf("%s", r.String())
		return r
	}
	now, err := a.Time(ctx).Result()
	must(err)
	ms := float64(now.UnixMilli())
	must(a.ZAdd(ctx, semKey,
		redis.Z{Score: -1, Member: "C:3"},              // the capacity
		redis.Z{Score: ms - 1000, Member: "P:expired"}, // expired, not pruned yet
		redis.Z{Score: ms + 60000, Member: "P:leak"},   // the leak: outlives every TTL
	).Err())
	must(a.Do(ctx, "ZADD", semKey, "+inf", "P:forever").Err()) // without expiry: by design
	r := scan()
	if r.Verdict != models.Fail || r.Violations != 1 || !strings.Contains(r.Summary, "1 entry:") || !strings.Contains(r.Summary, "P:leak") {
		t.Fatalf("the permit outliving every TTL is not reported as the one leak: %s", r.String())
	}
	for _, not := range []string{"C:3", "P:expired", "P:forever"} {
		if strings.Contains(r.Summary, not) {
			t.Fatalf("the scan reports %s, which is no leak: %s", not, r.Summary)
		}
	}
	must(a.ZRem(ctx, semKey, "P:leak").Err())
	if r := scan(); r.Verdict != models.Pass {
		t.Fatalf("no leak left, but %s", r.String())
	}
}
