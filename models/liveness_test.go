package models

import (
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// Liveness tests use a 10 ms wake bound, times in ms.
var live = Options{WakeBound: 10 * time.Millisecond}

func TestLivenessPass(t *testing.T) {
	cases := map[string]*builder{
		"empty":  {},
		"single": new(builder).ok(1, m(0), m(1), acqWait("k", 1, 1000)),
		"woken after a release": new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			ok(2, m(50), m(108), acqWait("k", 2, 1000)),
		// Released at 101, acquired by the waiter at 111: exactly the bound.
		"at the bound": new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			ok(2, m(50), m(111), acqWait("k", 2, 1000)),
		"someone else got it": new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			ok(3, m(102), m(103), acq("k", 3, 1000)).ok(2, m(50), m(500), acqWait("k", 2, 1000)),
		"woken by the expiry": new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(50), m(105), acqWait("k", 2, 1000)),
		"gave up before the lock was free": new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).
			fail(2, m(50), m(60), acqWait("k", 0, 1000)).ok(1, m(100), m(101), rel("k")),
		"an unknown acquisition may hold it": new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			info(3, m(95), m(102), acq("k", 0, 1000)).ok(2, m(50), m(500), acqWait("k", 2, 1000)),
		"not released: still held": new(builder).ok(1, m(0), m(1), acq("k", 1, 0)).fail(2, m(50), m(5000), acqWait("k", 0, 1000)),
		"release of another's lease frees nothing": new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).
			ok(1, m(100), m(101), history.Op{F: history.FRelease, Key: "k", Value: history.ValueNotOwned}).
			ok(2, m(50), m(995), acqWait("k", 2, 1000)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) { expect(t, CheckLiveness(b.build(t), live), Pass) })
	}
}

func TestLivenessFail(t *testing.T) {
	cases := map[string]struct {
		b    *builder
		want string
	}{
		"slept through a release": {new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			ok(2, m(50), m(112), acqWait("k", 2, 1000)), "lock released by 0.101s"},
		"slept through an expiry": {new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(50), m(200), acqWait("k", 2, 1000)),
			"lock expired"},
		"sleeps forever": {new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			info(2, m(50), -1, acqWait("k", 0, 1000)).ok(3, m(300), m(301), history.Op{F: "noop"}), "never completed"},
		"gave up while free": {new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			fail(2, m(50), m(300), acqWait("k", 0, 1000)), "waiting since 0.050s"},
		"arrived while free": {new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
			ok(2, m(200), m(300), acqWait("k", 2, 1000)), "waiting since 0.200s"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) { expect(t, CheckLiveness(c.b.build(t), live), Fail, c.want) })
	}
}

func TestLivenessLostNotifications(t *testing.T) {
	// Released at 101 ms; the lease would have expired at 1001 ms.
	b := new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
		ok(2, m(50), m(1005), acqWait("k", 2, 1000))
	expect(t, CheckLiveness(b.build(t), live), Fail)
	lost := live
	lost.LostNotifications = true
	expect(t, CheckLiveness(b.build(t), lost), Pass)
	late := new(builder).ok(1, m(0), m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).
		ok(2, m(50), m(1020), acqWait("k", 2, 1000))
	expect(t, CheckLiveness(late.build(t), lost), Fail)
}

func leakScan(count int64, value string) history.Op {
	return history.Op{F: history.FLeakScan, Key: "*", Count: count, Value: value}
}

func TestLeaks(t *testing.T) {
	base := func() *builder {
		return new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(10), m(11), rel("k")).ok(2, m(20), m(21), acq("k", 2, 100))
	}
	// Nothing to check is never a PASS; neither is a scan that did not complete.
	expect(t, CheckLeaks(new(builder).build(t), Options{}), Unknown, "nothing checked")
	expect(t, CheckLeaks(base().info(9, m(500), m(501), leakScan(0, "")).build(t), Options{}), Unknown, "did not complete")
	expect(t, CheckLeaks(base().ok(9, m(500), m(501), leakScan(0, "")).build(t), Options{}), Pass)
	expect(t, CheckLeaks(base().ok(9, m(500), m(501), leakScan(2, "k\nsem:owners")).build(t), Options{}), Fail, "leak", "sem:owners")
	expect(t, CheckLeaks(base().ok(9, m(500), m(501), leakScan(0, "k")).build(t), Options{}), Fail)
	// Too early: the second lease may live until 121 ms.
	expect(t, CheckLeaks(base().ok(9, m(110), m(111), leakScan(1, "k")).build(t), Options{}), Unknown, "before every TTL")
	// An entry without expiry whose release has an unknown outcome: it may
	// still be what the scan found.
	noTTL := new(builder).ok(1, m(0), m(1), acq("k", 1, 0)).info(1, m(10), -1, rel("k")).ok(9, m(500), m(501), leakScan(1, "k"))
	expect(t, CheckLeaks(noTTL.build(t), Options{}), Unknown, "no expiry")
	// An entry without expiry never released (its holder crashed) is kept
	// by design and not listed by the scan: what the scan found is a leak,
	// and a clean scan passes.
	crashed := new(builder).ok(1, m(0), m(1), acq("k", 1, 0))
	expect(t, CheckLeaks(crashed.ok(9, m(500), m(501), leakScan(1, "k other")).build(t), Options{}), Fail, "leak")
	crashed = new(builder).ok(1, m(0), m(1), acq("k", 1, 0))
	expect(t, CheckLeaks(crashed.ok(9, m(500), m(501), leakScan(0, "")).build(t), Options{}), Pass)
	// Released ("released" answered) and still there: a leak.
	survived := new(builder).ok(1, m(0), m(1), acq("k", 1, 0)).ok(1, m(10), m(11), rel("k")).ok(9, m(500), m(501), leakScan(1, "k"))
	expect(t, CheckLeaks(survived.build(t), Options{}), Fail, "leak")
	// An acquisition that never completed may still take effect.
	pending := base().info(3, m(30), -1, acq("k", 0, 100)).ok(9, m(500), m(501), leakScan(1, "k"))
	expect(t, CheckLeaks(pending.build(t), Options{}), Unknown)
}

// An abandoned lease (its holder crashed: no release) is free from its
// holder's deadline (acquisition + ttl + drift), with or without lost
// notifications: a waiter must take it within WakeBound of that deadline, not
// when the crashed holder's process comes back and touches the key.
func TestLivenessAbandonedLease(t *testing.T) {
	lost := live
	lost.LostNotifications = true
	for _, o := range []Options{live, lost} {
		// Acquired at 1 ms for 100 ms, never released; a waiter takes it just
		// after the deadline.
		woken := new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).
			ok(2, m(10), m(104), acqWait("k", 2, 100))
		expect(t, CheckLiveness(woken.build(t), o), Pass)
		// The waiters sleep until the crashed holder returns at 400 ms.
		slept := new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).
			ok(2, m(10), m(401), acqWait("k", 2, 100)).ok(3, m(20), m(420), acqWait("k", 3, 100)).
			fail(1, m(400), m(400), acqWait("k", 0, 100))
		expect(t, CheckLiveness(slept.build(t), o), Fail, "lock expired")
	}
}
