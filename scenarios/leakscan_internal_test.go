package scenarios

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestLeakScanCatchesAHandMadeLeak: prim leaves no entry without a TTL, so no
// mutant of it can leak once every TTL has elapsed; the leak step is shown
// instead on a real server holding a hand-made leak (a lease key and a hash
// field without expiry) beside what is not one (the fencing counter, an
// expired lease the server has not reclaimed because active expiry is off):
// the scan finds exactly the leaks and the leaks checker FAILs on them, and
// PASSes once they are gone.
func TestLeakScanCatchesAHandMadeLeak(t *testing.T) {
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
	// As waiting-lock/abandoned-holders does it: the scans below must then
	// still read the workload's database.
	must(activeExpiryOff(ctx, &Env{Topo: topo}))
	hashFieldTTL := a.Do(ctx, "COMMAND", "INFO", "HPEXPIRE").Err() == nil && a.Do(ctx, "HPEXPIRE", "probe", 1, "FIELDS", 1, "f").Err() == nil
	scan := func(key string) models.Result {
		t.Helper()
		env := &Env{Topo: topo, Rec: history.NewRecorder(time.Now())}
		// One lease of 100ms, acquired and never released: nothing of it
		// may remain 100ms (+ drift) after its acquisition returned.
		env.Rec.Invoke(0, history.Op{F: history.FAcquire, Key: key, TTLMs: 100})
		env.Rec.OK(0, history.Op{Token: 1, Owner: "A", TTLMs: 100})
		time.Sleep(250 * time.Millisecond)
		env.scanLeaks(ctx, 1, key, nil)
		r := models.CheckLeaks(env.Rec.History(), models.Options{Drift: 20 * time.Millisecond})
		t.Logf("%s: %s", key, r.String())
		return r
	}

	must(a.Set(ctx, "{"+lockKey+"}:fence", 7, 0).Err())             // the counter: permanent by design
	must(a.Set(ctx, lockKey, "expired", 50*time.Millisecond).Err()) // expired, still in memory
	must(a.Set(ctx, "{"+lockKey+"}:lease", "A:1", 0).Err())         // the leak: no TTL
	r := scan(lockKey)
	if r.Verdict != models.Fail || r.Violations != 1 || !strings.Contains(r.Summary, "{"+lockKey+"}:lease") {
		t.Fatalf("the lease key without TTL is not reported as the one leak: %s", r.String())
	}
	if strings.Contains(r.Summary, ":fence") || strings.Contains(r.Summary, "expired") || strings.Contains(r.Summary, "string, pttl 0") {
		t.Fatalf("the scan reports what is not a leak: %s", r.Summary)
	}
	must(a.Del(ctx, "{"+lockKey+"}:lease").Err())
	if r := scan(lockKey); r.Verdict != models.Pass {
		t.Fatalf("no leak left, but %s", r.String())
	}

	if !hashFieldTTL {
		t.Logf("%s has no hash-field expiry: the hash-lease part is skipped", b)
		return
	}
	must(a.HSet(ctx, leaseHash, "worker:0", "A", "worker:1", "B").Err())
	must(a.Do(ctx, "HPEXPIRE", leaseHash, 50, "FIELDS", 1, "worker:1").Err()) // expires; worker:0 leaks
	r = scan(leaseHash)
	if r.Verdict != models.Fail || !strings.Contains(r.Summary, "1 entry:") || !strings.Contains(r.Summary, "worker:0") || strings.Contains(r.Summary, "worker:1") {
		t.Fatalf("the field without expiry is not reported as the one leak: %s", r.String())
	}
	must(a.HDel(ctx, leaseHash, "worker:0").Err())
	if r := scan(leaseHash); r.Verdict != models.Pass {
		t.Fatalf("no leak left, but %s", r.String())
	}
}

// TestLeakScanReadsReplicas: the scan reads every data node, not only those
// that say they are primaries (a replica's data is what a later promotion
// serves): a leak written on the primary is found on its replica too, named
// as the replica's; in a cluster a replica is read with READONLY (else its
// keys answer MOVED and the scan cannot complete).
func TestLeakScanReadsReplicas(t *testing.T) {
	b := testbed.DefaultBuild
	if m := testbed.Matrix(); len(m) == 1 {
		b = m[0]
	}
	for _, kind := range []string{"replicated", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			var topo *testbed.Topology
			if kind == "cluster" {
				topo = testbed.Cluster(t, b, 3, 1)
			} else {
				topo = testbed.Replicated(t, b, 1, 0)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := topo.Client()
			if err != nil {
				t.Fatal(err)
			}
			key := "{" + lockKey + "}:lease"
			if err := c.Set(ctx, key, "A:1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
				t.Fatal(err)
			}
			env := &Env{Topo: topo, Rec: history.NewRecorder(time.Now())}
			env.Rec.Invoke(0, history.Op{F: history.FAcquire, Key: lockKey, TTLMs: 10})
			env.Rec.OK(0, history.Op{Token: 1, Owner: "A", TTLMs: 10})
			time.Sleep(100 * time.Millisecond)
			env.scanLeaks(ctx, 1, lockKey, nil)
			h := env.Rec.History()
			scan := h.Ops[len(h.Ops)-1]
			if scan.Type != history.OK || scan.Count != 2 || !strings.Contains(scan.Value, " (replica): "+key) {
				t.Fatalf("scan %s %d %q (err %q): want the key on the primary and on its replica", scan.Type, scan.Count, scan.Value, scan.Err)
			}
		})
	}
}
