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
// on a real server holding a hand-made semaphore instead: beside the leaks (a
// permit whose deadline is a minute away, after a run whose TTLs are 100ms,
// and a permit without expiry whose release was invoked but which is still
// there) it holds what is no leak (the capacity member, an expired permit not
// yet pruned, the permit without expiry of a crashed holder, which only a
// release ends). The scan finds exactly the two leaks and the leaks checker
// FAILs on them, and PASSes once they are gone, the crashed holder's permit
// still there.
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
		// One permit of 100ms, acquired and never released; two without
		// expiry: one whose holder crashed (no release), one whose release
		// was answered "released" and which survived it.
		env.Rec.Invoke(0, history.Op{F: history.FSemAcquire, Key: semKey, TTLMs: 100, Capacity: 3, N: 1})
		env.Rec.OK(0, history.Op{Owner: "P:a", TTLMs: 100})
		env.Rec.Invoke(2, history.Op{F: history.FSemAcquire, Key: semKey, Capacity: 3, N: 1})
		env.Rec.OK(2, history.Op{Owner: "P:forever"})
		env.Rec.Invoke(3, history.Op{F: history.FSemAcquire, Key: semKey, Capacity: 3, N: 1})
		env.Rec.OK(3, history.Op{Owner: "P:released-forever"})
		env.Rec.Invoke(3, history.Op{F: history.FRelease, Key: semKey, Owner: "P:released-forever"})
		env.Rec.OK(3, history.Op{Value: history.ValueReleased})
		time.Sleep(250 * time.Millisecond)
		env.scanLeaks(ctx, 1, semKey, keptOwners(env.Rec.History()))
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
	must(a.Do(ctx, "ZADD", semKey, "+inf", "P:forever").Err())          // a crashed holder's: by design
	must(a.Do(ctx, "ZADD", semKey, "+inf", "P:released-forever").Err()) // released: a leak
	r := scan()
	if r.Verdict != models.Fail || !strings.Contains(r.Summary, "2 entries:") || !strings.Contains(r.Summary, "P:leak") ||
		!strings.Contains(r.Summary, "P:released-forever (without expiry") {
		t.Fatalf("the permit outliving every TTL and the released permit without expiry are not reported as the two leaks: %s", r.String())
	}
	for _, not := range []string{"C:3", "P:expired", "P:forever "} {
		if strings.Contains(r.Summary, not) {
			t.Fatalf("the scan reports %s, which is no leak: %s", not, r.Summary)
		}
	}
	must(a.ZRem(ctx, semKey, "P:leak", "P:released-forever").Err())
	if r := scan(); r.Verdict != models.Pass {
		t.Fatalf("no leak left, but %s", r.String())
	}
	if n, err := a.ZScore(ctx, semKey, "P:forever").Result(); err != nil || n < 1e300 {
		t.Fatalf("the crashed holder's permit: %v, %v", n, err)
	}
}
