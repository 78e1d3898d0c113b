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
