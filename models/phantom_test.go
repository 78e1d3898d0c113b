package models

import (
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

func sample(key, owner string) history.Op {
	return history.Op{F: history.FSample, Key: key, Owner: owner}
}

func TestNoPhantomOwner(t *testing.T) {
	// A legal run: A holds "A:1"; B's attempt is contended (fail); C's is
	// info and its lease "C:2" is seen; samples between see nothing.
	legal := func() *builder {
		return new(builder).
			ok(1, m(0), m(1), owned(acq("k", 1, 100), "A:1")).
			ok(9, m(2), m(3), sample("k", "A:1")).
			fail(2, m(4), m(5), owned(acq("k", 0, 100), "B")).
			ok(9, m(6), m(7), sample("k", "A:1")).
			ok(1, m(10), m(11), owned(rel("k"), "A:1")).
			ok(9, m(12), m(13), sample("k", "")).
			info(3, m(20), m(300), owned(acq("k", 0, 100), "C")).
			ok(9, m(30), m(31), sample("k", "C:2")).
			fail(9, m(40), m(41), sample("k", ""))
	}
	expect(t, CheckNoPhantomOwner(legal().build(t), Options{}), Pass, "5 samples (3 saw an owner, 1 failed)")

	// The replayed-script bug: B's attempt answered fail, and its lease
	// (owner and token) is seen after that answer.
	h := legal().ok(8, m(6), m(7), sample("k", "B:2")).build(t)
	expectKind(t, CheckNoPhantomOwner(h, Options{}), KindPhantomOwner, `"B:2"`, "answered fail")

	// A read overlapping the failed attempt proves nothing: the attempt may
	// have taken and given back the lease before answering.
	h = legal().ok(8, m(4), m(6), sample("k", "B")).build(t)
	expect(t, CheckNoPhantomOwner(h, Options{}), Pass)

	// An owner nobody sent, and one seen before its acquisition began.
	h = legal().ok(9, m(50), m(51), sample("k", "Z:9")).build(t)
	expectKind(t, CheckNoPhantomOwner(h, Options{}), KindUnknownOwner, "the owner of no acquisition")
	h = new(builder).ok(9, m(0), m(1), sample("k", "A:1")).
		ok(1, m(2), m(3), owned(acq("k", 1, 100), "A:1")).build(t)
	expectKind(t, CheckNoPhantomOwner(h, Options{}), KindUnknownOwner, "before any acquisition")

	// One acquisition run on two primaries: during a failover the script ran
	// on the old primary (token 9), the reply was lost with the connection the
	// demotion closed, and go-redis's resend ran it again on the new primary,
	// whose counter was behind (token 3, answered ok). The old primary's
	// "D:9" is that acquisition's owner with another token, not an unknown one.
	h = legal().ok(4, m(40), m(45), owned(acq("k", 3, 100), "D:3")).ok(9, m(42), m(43), sample("k", "D:9")).build(t)
	expect(t, CheckNoPhantomOwner(h, Options{}), Pass)

	// An owner on another lock is not this lock's.
	h = legal().ok(9, m(50), m(51), history.Op{F: history.FSample, Key: "other", Owner: "A:1"}).build(t)
	expectKind(t, CheckNoPhantomOwner(h, Options{}), KindUnknownOwner)

	// Acquisitions without an owner may have sent an unknown one: undecided.
	h = legal().info(4, m(40), m(45), acq("k", 0, 100)).ok(9, m(50), m(51), sample("k", "Z:9")).build(t)
	expect(t, CheckNoPhantomOwner(h, Options{}), Unknown, "may have sent it")

	// Nothing sampled held: nothing to check, never PASS.
	h = new(builder).ok(1, m(0), m(1), owned(acq("k", 1, 100), "A:1")).ok(9, m(2), m(3), sample("k", "")).build(t)
	expect(t, CheckNoPhantomOwner(h, Options{}), Unknown, "nothing to check")
	if c, _ := Lookup("no-phantom-owner"); c.Applies(new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).build(t)) {
		t.Error("applies to a history without samples")
	}
}

func TestCountUncertainObserved(t *testing.T) {
	h := new(builder).ok(1, m(0), m(1), owned(acq("k", 1, 100), "A:1")).
		info(2, m(2), m(300), owned(acq("k", 0, 100), "B")).
		info(3, m(3), m(300), owned(acq("k", 0, 100), "C")).
		ok(9, m(400), m(401), sample("k", "B:2")).
		ok(9, m(402), m(403), sample("k", "B:2")).build(t)
	if u := CountUncertain(h); u.Info != 2 || u.InfoAcquisitions != 2 || u.Observed != 1 {
		t.Errorf("%+v, want 2 info acquisitions, 1 observed", u)
	}
	h = new(builder).info(2, m(2), m(300), owned(acq("k", 0, 100), "B")).ok(9, m(400), m(401), sample("k", "")).build(t)
	if u := CountUncertain(h); u.Observed != -1 {
		t.Errorf("%+v, want -1 observed without a sample that saw the lock held", u)
	}
}

// expectKind requires a FAIL with violations of kind only.
func expectKind(t *testing.T, r Result, kind string, contains ...string) {
	t.Helper()
	expect(t, r, Fail, contains...)
	if r.Kinds[kind] == 0 || len(r.Kinds) != 1 {
		t.Errorf("kinds %v, want only %s", r.Kinds, kind)
	}
}
