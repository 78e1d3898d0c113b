package models

import (
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

func renew(key string, ttlMs int64) history.Op {
	return history.Op{F: history.FRenew, Key: key, TTLMs: ttlMs}
}

// Times in these tests are in ms·msNs so that TTLs (in ms) line up.
func m(v int64) int64 { return v * msNs }

func TestExclusionPass(t *testing.T) {
	cases := map[string]*builder{
		"empty":  {},
		"single": new(builder).ok(1, m(0), m(1), acq("k", 1, 100)),
		"release then acquire": new(builder).
			ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(10), m(11), rel("k")).ok(2, m(5), m(12), acq("k", 2, 100)),
		// A's window is [1, 10) (release invoked at 10); B's starts at 10.
		"touching at the boundary": new(builder).
			ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(10), m(12), rel("k")).ok(2, m(2), m(10), acq("k", 2, 100)),
		// A invoked at 0 with ttl 100: its window ends at 100 exactly.
		"expiry at the boundary": new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(90), m(100), acq("k", 2, 100)),
		"contended acquisitions fail": new(builder).
			ok(1, m(0), m(1), acq("k", 1, 100)).fail(2, m(5), m(6), acq("k", 0, 100)).fail(3, m(7), m(8), acq("k", 0, 100)),
		"info acquisition holds nothing": new(builder).info(1, m(0), m(1), acq("k", 0, 100)).ok(2, m(5), m(6), acq("k", 2, 100)),
		"different keys":                 new(builder).ok(1, m(0), m(1), acq("a", 1, 100)).ok(2, m(0), m(1), acq("b", 1, 100)),
		"hash fields are separate leases": new(builder).
			ok(1, m(0), m(1), history.Op{F: history.FAcquire, Key: "h", Field: "x", TTLMs: 100}).
			ok(2, m(0), m(1), history.Op{F: history.FAcquire, Key: "h", Field: "y", TTLMs: 100}),
		"failed renewal does not extend": new(builder).
			ok(1, m(0), m(1), acq("k", 1, 100)).fail(1, m(80), m(81), renew("k", 100)).ok(2, m(95), m(101), acq("k", 2, 100)),
		"release by owner from another process": new(builder).
			ok(1, m(0), m(1), history.Op{F: history.FAcquire, Key: "k", Owner: "o1", TTLMs: 1000}).
			ok(3, m(10), m(11), history.Op{F: history.FRelease, Key: "k", Owner: "o1"}).
			ok(2, m(5), m(12), acq("k", 2, 1000)),
		"waiting acquisitions": new(builder).
			ok(1, m(0), m(1), acqWait("k", 1, 100)).ok(1, m(10), m(11), rel("k")).ok(2, m(2), m(10), acqWait("k", 2, 100)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			expect(t, CheckExclusion(b.build(t), Options{}), Pass)
		})
	}
}

func TestExclusionFail(t *testing.T) {
	cases := map[string]struct {
		b    *builder
		o    Options
		want string
	}{
		"two holders": {b: new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(5), m(6), acq("k", 2, 100)), want: "validity windows overlap"},
		// Release without owner check: proc 2 deletes proc 1's lease and
		// proc 3 acquires while proc 1 still holds it.
		"release without owner check": {b: new(builder).
			ok(1, m(0), m(1), history.Op{F: history.FAcquire, Key: "k", Owner: "a", TTLMs: 1000}).
			ok(2, m(10), m(11), history.Op{F: history.FRelease, Key: "k", Owner: "b", Value: history.ValueReleased}).
			ok(3, m(12), m(13), history.Op{F: history.FAcquire, Key: "k", Owner: "c", TTLMs: 1000}), want: "proc 1 and"},
		"one nanosecond of overlap": {b: new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(90), m(100)-1, acq("k", 2, 100)), want: "overlap"},
		"renewal extends the window": {b: new(builder).
			ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(80), m(81), renew("k", 100)).ok(2, m(150), m(151), acq("k", 2, 100)), want: "overlap"},
		"late renewal reopens a window": {b: new(builder).
			ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(150), m(151), renew("k", 100)).ok(2, m(200), m(201), acq("k", 2, 100)), want: "overlap"},
		"no ttl holds until released": {b: new(builder).ok(1, m(0), m(1), acq("k", 1, 0)).ok(2, m(5000), m(5001), acq("k", 2, 0)), want: "never"},
		"drift too small": {b: new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(85), m(89), acq("k", 2, 100)),
			o: Options{Drift: 10 * time.Millisecond}, want: "overlap"},
		"hash field": {b: new(builder).
			ok(1, m(0), m(1), history.Op{F: history.FAcquire, Key: "h", Field: "x", TTLMs: 100}).
			ok(2, m(5), m(6), history.Op{F: history.FAcquire, Key: "h", Field: "x", TTLMs: 100}), want: `key "h#x"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			expect(t, CheckExclusion(c.b.build(t), c.o), Fail, c.want)
		})
	}
}

func TestExclusionDriftAllowance(t *testing.T) {
	// B's window starts at 95 ms, 5 ms before A's ttl runs out: a server
	// clock 5 ms fast. Tolerated with a 10 ms allowance, not without.
	b := new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(90), m(95), acq("k", 2, 100))
	expect(t, CheckExclusion(b.build(t), Options{}), Fail)
	expect(t, CheckExclusion(b.build(t), Options{Drift: 10 * time.Millisecond}), Pass)
}

func TestExclusionCountsEveryOverlap(t *testing.T) {
	b := new(builder)
	for p := 0; p < 5; p++ {
		b.ok(p, m(0), m(1), acq("k", int64(p+1), 100))
	}
	r := CheckExclusion(b.build(t), Options{})
	expect(t, r, Fail)
	if r.Violations != 4 {
		t.Errorf("violations = %d, want 4", r.Violations)
	}
}

func rd(key string, ttl int64) history.Op {
	return history.Op{F: history.FAcquireRead, Key: key, TTLMs: ttl}
}
func wr(key string, ttl int64) history.Op {
	return history.Op{F: history.FAcquireWrite, Key: key, TTLMs: ttl}
}

func TestReadWrite(t *testing.T) {
	pass := map[string]*builder{
		"empty":         {},
		"many readers":  new(builder).ok(1, m(0), m(1), rd("k", 100)).ok(2, m(2), m(3), rd("k", 100)).ok(3, m(4), m(5), rd("k", 100)),
		"writer after":  new(builder).ok(1, m(0), m(1), rd("k", 100)).ok(2, m(50), m(100), wr("k", 100)),
		"readers after": new(builder).ok(1, m(0), m(1), wr("k", 100)).ok(1, m(10), m(11), rel("k")).ok(2, m(5), m(10), rd("k", 100)),
	}
	for name, b := range pass {
		t.Run(name, func(t *testing.T) { expect(t, CheckReadWrite(b.build(t), Options{}), Pass) })
	}
	fail := map[string]*builder{
		"writer with a reader": new(builder).ok(1, m(0), m(1), rd("k", 100)).ok(2, m(2), m(3), wr("k", 100)),
		"reader with a writer": new(builder).ok(1, m(0), m(1), wr("k", 100)).ok(2, m(2), m(3), rd("k", 100)),
		"two writers":          new(builder).ok(1, m(0), m(1), wr("k", 100)).ok(2, m(2), m(3), wr("k", 100)),
		// The long reader's window is still open when the writer arrives,
		// though a shorter reader's has closed.
		"writer after a short reader": new(builder).ok(1, m(0), m(1), rd("k", 500)).ok(2, m(2), m(3), rd("k", 10)).
			ok(3, m(100), m(101), wr("k", 100)),
	}
	for name, b := range fail {
		t.Run(name, func(t *testing.T) { expect(t, CheckReadWrite(b.build(t), Options{}), Fail, "overlap") })
	}
}

func sem(key string, n, capacity, ttl int64) history.Op {
	return history.Op{F: history.FSemAcquire, Key: key, N: n, Capacity: capacity, TTLMs: ttl}
}

func TestSemaphore(t *testing.T) {
	pass := map[string]*builder{
		"empty":       {},
		"single":      new(builder).ok(1, m(0), m(1), sem("s", 0, 2, 100)),
		"at capacity": new(builder).ok(1, m(0), m(1), sem("s", 0, 2, 100)).ok(2, m(2), m(3), sem("s", 0, 2, 100)),
		// The first permit's window ends at 100 exactly as the third starts.
		"boundary": new(builder).ok(1, m(0), m(1), sem("s", 0, 2, 100)).ok(2, m(2), m(3), sem("s", 0, 2, 100)).
			ok(3, m(50), m(100), sem("s", 0, 2, 100)),
		"released": new(builder).ok(1, m(0), m(1), sem("s", 0, 2, 0)).ok(2, m(2), m(3), sem("s", 0, 2, 0)).
			ok(1, m(10), m(11), rel("s")).ok(3, m(5), m(12), sem("s", 0, 2, 0)),
		"weights": new(builder).ok(1, m(0), m(1), sem("s", 2, 3, 100)).ok(2, m(2), m(3), sem("s", 1, 3, 100)),
		"info and fail hold nothing": new(builder).ok(1, m(0), m(1), sem("s", 0, 1, 100)).info(2, m(2), m(3), sem("s", 0, 1, 100)).
			fail(3, m(2), m(3), sem("s", 0, 1, 100)),
	}
	for name, b := range pass {
		t.Run(name, func(t *testing.T) { expect(t, CheckSemaphore(b.build(t), Options{}), Pass) })
	}
	fail := map[string]*builder{
		"over capacity": new(builder).ok(1, m(0), m(1), sem("s", 0, 2, 100)).ok(2, m(2), m(3), sem("s", 0, 2, 100)).
			ok(3, m(4), m(5), sem("s", 0, 2, 100)),
		// Non-atomic prune: an expired permit is pruned and its slot given
		// away twice.
		"non-atomic prune": new(builder).ok(1, m(0), m(1), sem("s", 0, 1, 50)).ok(2, m(60), m(61), sem("s", 0, 1, 100)).
			ok(3, m(60), m(62), sem("s", 0, 1, 100)),
		"weights":        new(builder).ok(1, m(0), m(1), sem("s", 2, 3, 100)).ok(2, m(2), m(3), sem("s", 2, 3, 100)),
		"one nanosecond": new(builder).ok(1, m(0), m(1), sem("s", 0, 1, 100)).ok(3, m(50), m(100)-1, sem("s", 0, 1, 100)),
	}
	for name, b := range fail {
		t.Run(name, func(t *testing.T) { expect(t, CheckSemaphore(b.build(t), Options{}), Fail, "capacity") })
	}
}

func TestSemaphoreCapacity(t *testing.T) {
	b := new(builder).ok(1, m(0), m(1), sem("s", 0, 0, 100)).ok(2, m(2), m(3), sem("s", 0, 0, 100))
	expect(t, CheckSemaphore(b.build(t), Options{}), Unknown, "no capacity")
	expect(t, CheckSemaphore(b.build(t), Options{Capacity: 2}), Pass)
	r := CheckSemaphore(b.build(t), Options{Capacity: 1})
	expect(t, r, Fail, "2 permits held")
	if len(r.Evidence[0].Ops) != 2 {
		t.Errorf("evidence lists %d ops, want the 2 holders", len(r.Evidence[0].Ops))
	}
}
