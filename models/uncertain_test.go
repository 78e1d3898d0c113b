package models

import (
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

func TestCountUncertain(t *testing.T) {
	// tokens 1, 2, 4: the info acquisition between took token 3.
	h := new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(10), m(11), rel("k")).
		ok(2, m(20), m(21), acq("k", 2, 100)).ok(2, m(30), m(31), rel("k")).
		info(3, m(40), m(290), acq("k", 0, 100)).info(4, m(41), m(291), acq("k", 0, 100)).
		ok(1, m(300), m(301), acq("k", 4, 100)).build(t)
	u := CountUncertain(h)
	if u.Info != 2 || u.InfoAcquisitions != 2 || u.Executed != 1 {
		t.Errorf("%+v, want 2 info acquisitions, 1 executed", u)
	}
	// A counter reset: the tokens say nothing.
	h = new(builder).ok(1, m(0), m(1), acq("k", 7, 100)).info(3, m(40), m(290), acq("k", 0, 100)).
		ok(2, m(300), m(301), acq("k", 1, 100)).build(t)
	if u := CountUncertain(h); u.Executed != -1 {
		t.Errorf("%+v, want unknown after a regression", u)
	}
	// A semaphore's uncertain acquisition is an acquisition too (the report
	// said "0 of them acquisitions" of a semaphore run); no tokens to tell.
	h = new(builder).info(1, m(0), m(300), history.Op{F: history.FSemAcquire, Key: "s", TTLMs: 100, Capacity: 1}).build(t)
	if u := CountUncertain(h); u.Info != 1 || u.InfoAcquisitions != 1 || u.Executed != -1 {
		t.Errorf("%+v, want 1 info acquisition, executed unknown", u)
	}
}

// TestCountUncertainCountsEveryAcquisition: an uncertain read or write lease
// acquisition is an uncertain acquisition too (the report says how many of
// the info operations were acquisitions), though no token can tell whether
// it ran; an uncertain renewal is none.
func TestCountUncertainCountsEveryAcquisition(t *testing.T) {
	h := new(builder).ok(1, m(0), m(1), history.Op{F: history.FAcquireRead, Key: "k", TTLMs: 100}).
		info(2, m(2), m(250), history.Op{F: history.FAcquireWrite, Key: "k", TTLMs: 100}).
		info(3, m(3), m(251), history.Op{F: history.FAcquireRead, Key: "k", TTLMs: 100}).
		info(1, m(10), m(260), history.Op{F: history.FRenew, Key: "k", TTLMs: 100}).build(t)
	if u := CountUncertain(h); u.Info != 3 || u.InfoAcquisitions != 2 || u.Executed != -1 {
		t.Errorf("%+v, want 3 info operations, 2 of them acquisitions, executed unknown", u)
	}
}
