package models

import (
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

func create(key string, count, gen int64) history.Op {
	return history.Op{F: history.FLatchCreate, Key: key, Count: count, Gen: gen}
}
func reset(key string, count, gen int64) history.Op {
	return history.Op{F: history.FLatchReset, Key: key, Count: count, Gen: gen}
}
func cd(key string, gen, remaining int64) history.Op {
	return history.Op{F: history.FLatchCountDown, Key: key, Gen: gen, Count: remaining}
}
func wait(key string, gen int64, done bool) history.Op {
	v := history.ValueFalse
	if done {
		v = history.ValueTrue
	}
	return history.Op{F: history.FLatchWait, Key: key, Gen: gen, Value: v}
}

func TestLatchPass(t *testing.T) {
	cases := map[string]*builder{
		"empty":  {},
		"single": new(builder).ok(1, 0, 10, create("l", 3, 1)),
		"count down and wait": new(builder).ok(1, 0, 10, create("l", 3, 1)).
			ok(2, 20, 30, cd("l", 1, 2)).ok(3, 40, 50, cd("l", 1, 1)).ok(4, 15, 90, wait("l", 1, true)).ok(2, 60, 70, cd("l", 1, 0)),
		"concurrent count-downs in any order": new(builder).ok(1, 0, 10, create("l", 3, 1)).
			ok(2, 20, 60, cd("l", 1, 1)).ok(3, 20, 60, cd("l", 1, 2)).ok(4, 20, 60, cd("l", 1, 0)),
		"count-downs after zero stay at zero": new(builder).ok(1, 0, 10, create("l", 1, 1)).
			ok(2, 20, 30, cd("l", 1, 0)).ok(3, 40, 50, cd("l", 1, 0)),
		"replaced generation returns -1": new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, reset("l", 2, 2)).
			ok(3, 40, 50, cd("l", 1, -1)).ok(4, 5, 35, wait("l", 1, false)).ok(3, 60, 70, cd("l", 2, 1)),
		// The reset was concurrent: the count-down may have come first.
		"concurrent reset": new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 50, reset("l", 2, 2)).
			ok(3, 30, 40, cd("l", 1, 1)),
		"info count-down may open the latch": new(builder).ok(1, 0, 10, create("l", 2, 1)).
			ok(2, 20, 30, cd("l", 1, 1)).info(3, 40, 50, cd("l", 1, 0)).ok(4, 15, 90, wait("l", 1, true)),
		"deleted": new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, history.Op{F: history.FLatchDelete, Key: "l"}).
			ok(3, 40, 50, cd("l", 1, -1)).ok(4, 15, 45, wait("l", 1, false)),
		"joined": new(builder).ok(1, 0, 10, create("l", 1, 7)).ok(2, 20, 30, history.Op{F: history.FLatchJoin, Key: "l", Gen: 7}).
			ok(2, 40, 50, cd("l", 7, 0)).ok(3, 35, 60, wait("l", 7, true)),
		"zero count opens at once": new(builder).ok(1, 0, 10, create("l", 0, 1)).ok(2, 20, 30, wait("l", 1, true)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) { expect(t, CheckLatch(b.build(t), Options{}), Pass) })
	}
}

func TestLatchFail(t *testing.T) {
	cases := map[string]struct {
		b    *builder
		want string
	}{
		"decrements twice": {new(builder).ok(1, 0, 10, create("l", 4, 1)).ok(2, 20, 30, cd("l", 1, 2)), "decremented more than once"},
		"underflow":        {new(builder).ok(1, 0, 10, create("l", 1, 1)).ok(2, 20, 30, cd("l", 1, 0)).ok(3, 40, 50, cd("l", 1, -2)), "underflow"},
		"same remaining twice": {new(builder).ok(1, 0, 10, create("l", 3, 1)).ok(2, 20, 60, cd("l", 1, 2)).ok(3, 20, 60, cd("l", 1, 2)),
			"both returned 2"},
		"lost decrement": {new(builder).ok(1, 0, 10, create("l", 3, 1)).ok(2, 20, 30, cd("l", 1, 2)).ok(3, 40, 50, cd("l", 1, 1)).
			ok(2, 60, 70, cd("l", 1, 1)), "a decrement was lost"},
		"no decrement": {new(builder).ok(1, 0, 10, create("l", 3, 1)).ok(2, 20, 30, cd("l", 1, 3)), "no decrement"},
		"wait true too early": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, cd("l", 1, 1)).ok(3, 15, 35, wait("l", 1, true)),
			"only 1 of 2"},
		"wait false without replacement": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(3, 15, 35, wait("l", 1, false)),
			"neither replaced nor deleted"},
		"signal to a replaced generation": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, reset("l", 2, 2)).
			ok(3, 40, 50, cd("l", 1, 1)), "instead of -1"},
		"-1 without replacement": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(3, 40, 50, cd("l", 1, -1)), "had not been replaced"},
		"delete then signal": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, history.Op{F: history.FLatchDelete, Key: "l"}).
			ok(3, 40, 50, cd("l", 1, 1)), "instead of -1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) { expect(t, CheckLatch(c.b.build(t), Options{}), Fail, c.want) })
	}
}

func TestLatchUnknownInitialCount(t *testing.T) {
	// Generation 5 was created before the history began.
	h := new(builder).ok(1, 0, 10, history.Op{F: history.FLatchJoin, Key: "l", Gen: 5}).ok(2, 20, 30, wait("l", 5, true)).build(t)
	expect(t, CheckLatch(h, Options{}), Unknown, "initial count is not in the history")
	h = new(builder).ok(1, 0, 10, history.Op{F: history.FLatchJoin, Key: "l", Gen: 5}).ok(3, 12, 18, cd("l", 5, 0)).
		ok(2, 20, 30, wait("l", 5, true)).build(t)
	expect(t, CheckLatch(h, Options{}), Pass)
}

// TestLatchLostCompletion: a wait that ended unanswered (fail: its deadline
// passed) more than the wake bound after its generation reached 0, was
// created at 0 or was replaced lost its completion; one within the bound,
// or on a generation that never completed, did not.
func TestLatchLostCompletion(t *testing.T) {
	const ms = int64(time.Millisecond)
	timedOut := func(gen int64) history.Op {
		return history.Op{F: history.FLatchWait, Key: "l", Gen: gen, Err: "timed out"}
	}
	o := Options{WakeBound: time.Second}
	for name, b := range map[string]*builder{
		"never completed": new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, cd("l", 1, 1)).
			fail(3, 15, 5000*ms, timedOut(1)),
		"within the bound": new(builder).ok(1, 0, 10, create("l", 1, 1)).ok(2, 20, 30, cd("l", 1, 0)).
			fail(3, 15, 900*ms, timedOut(1)),
		"invoked late, within the bound of its invocation": new(builder).ok(1, 0, 10, create("l", 1, 1)).ok(2, 20, 30, cd("l", 1, 0)).
			fail(3, 3000*ms, 3900*ms, timedOut(1)),
		"replacement concurrent": new(builder).ok(1, 0, 10, create("l", 2, 1)).info(2, 20, 30, reset("l", 2, 2)).
			fail(3, 15, 5000*ms, timedOut(1)),
		"answered true within the bound": new(builder).ok(1, 0, 10, create("l", 1, 1)).ok(2, 20, 30, cd("l", 1, 0)).
			ok(3, 15, 900*ms, history.Op{F: history.FLatchWait, Key: "l", Gen: 1, Value: history.ValueTrue}),
	} {
		t.Run(name, func(t *testing.T) { expect(t, CheckLatch(b.build(t), o), Pass) })
	}
	for name, c := range map[string]struct {
		b    *builder
		want string
	}{
		"reached 0": {new(builder).ok(1, 0, 10, create("l", 1, 1)).ok(2, 20, 30, cd("l", 1, 0)).
			fail(3, 15, 2000*ms, timedOut(1)), "reached 0 at"},
		"created at 0": {new(builder).ok(1, 0, 10, create("l", 0, 1)).fail(3, 15, 2000*ms, timedOut(1)), "created with count 0"},
		"replaced": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, reset("l", 2, 2)).
			fail(3, 15, 2000*ms, timedOut(1)), "was replaced or deleted"},
		"deleted": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, history.Op{F: history.FLatchDelete, Key: "l"}).
			fail(3, 15, 2000*ms, timedOut(1)), "was replaced or deleted"},
		// Review: a waiter that only polls answered true 4.9s after the
		// zero, with a 1s bound, and passed.
		"answered true late": {new(builder).ok(1, 0, 10, create("l", 1, 1)).ok(2, 20, 30, cd("l", 1, 0)).
			ok(3, 15, 4930*ms, history.Op{F: history.FLatchWait, Key: "l", Gen: 1, Value: history.ValueTrue}), "answered true"},
		// Review: a waiter that slept through the zero and woke at the
		// reset seconds later passed.
		"answered false long after the zero": {new(builder).ok(1, 0, 10, create("l", 1, 1)).ok(2, 20, 30, cd("l", 1, 0)).
			ok(2, 4000*ms, 4001*ms, reset("l", 1, 2)).
			ok(3, 15, 4010*ms, history.Op{F: history.FLatchWait, Key: "l", Gen: 1, Value: history.ValueFalse}), "reached 0"},
		"answered false late": {new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, reset("l", 2, 2)).
			ok(3, 15, 2000*ms, history.Op{F: history.FLatchWait, Key: "l", Gen: 1, Value: history.ValueFalse}), "answered false"},
	} {
		t.Run(name, func(t *testing.T) {
			r := CheckLatch(c.b.build(t), o)
			expect(t, r, Fail, c.want)
			if len(r.Evidence) == 0 || r.Evidence[0].Kind != KindStuckWaiter {
				t.Fatalf("evidence %+v: want kind %s", r.Evidence, KindStuckWaiter)
			}
		})
	}
}

// TestLatchDecrementedTwiceNeverHazard: a count-down that decremented more
// than once (or not at all) is FAIL after a failover proven to have lost
// writes, even when the property lists its kind among the hazard's: a lost
// write leaves a count higher, never lower. A lost decrement (two answers
// of one remaining count) after the same failover stays the hazard. Before
// the latch kinds of their own, the double decrement was HAZARD.
func TestLatchDecrementedTwiceNeverHazard(t *testing.T) {
	nem := func(key, v string) history.Op { return history.Op{F: history.FNemesis, Key: key, Value: v} }
	p := Property{Checker: "latch", Expect: MayHazard, Hazards: []string{KindLatch, KindStuckWaiter, KindLatchDecrementedTwice}}
	for name, c := range map[string]struct {
		b    *builder
		want Judgement
		kind string
	}{
		"decremented twice": {new(builder).ok(1, m(0), m(10), create("l", 4, 1)).
			ok(9, m(100), m(110), nem(NemesisEvent, "failover")).ok(9, m(120), m(120), nem(NemesisEffectOngoing, "writes lost")).
			ok(2, m(200), m(210), cd("l", 1, 3)).ok(3, m(220), m(230), cd("l", 1, 1)), JudgedFail, KindLatchDecrementedTwice},
		"no decrement": {new(builder).ok(1, m(0), m(10), create("l", 4, 1)).
			ok(9, m(100), m(110), nem(NemesisEvent, "failover")).ok(9, m(120), m(120), nem(NemesisEffectOngoing, "writes lost")).
			ok(2, m(200), m(210), cd("l", 1, 4)), JudgedFail, KindLatchDecrementedTwice},
		"lost decrement": {new(builder).ok(1, m(0), m(10), create("l", 4, 1)).ok(2, m(20), m(30), cd("l", 1, 3)).
			ok(9, m(100), m(110), nem(NemesisEvent, "failover")).ok(9, m(120), m(120), nem(NemesisEffectOngoing, "writes lost")).
			ok(3, m(200), m(210), cd("l", 1, 3)), JudgedHazard, KindLatch},
	} {
		t.Run(name, func(t *testing.T) {
			h := c.b.build(t)
			r := CheckLatch(h, Options{})
			if r.Kinds[c.kind] == 0 {
				t.Fatalf("no %s violation: %v %s", c.kind, r.Kinds, r.Summary)
			}
			if got := Judge(p, &r, Effects(h)); got != c.want {
				t.Fatalf("Judge = %s, want %s: %s", got, c.want, r.Summary)
			}
		})
	}
}
