package models

import (
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// TestLeaseProtocolConflictMessages: a grant and a proof inside another
// owner's certain span are each reported, and say which they are (the
// message of a proof is only formatted for a violation).
func TestLeaseProtocolConflictMessages(t *testing.T) {
	renew := func(owner string) history.Op {
		return history.Op{F: history.FRenew, Key: "k", Owner: owner, TTLMs: 1000}
	}
	h := new(builder).
		ok(1, 0, 10*msNs, owned(acq("k", 1, 1000), "a")).
		ok(1, 100*msNs, 110*msNs, renew("a")).
		ok(2, 20*msNs, 30*msNs, owned(acq("k", 2, 1000), "b")).
		ok(2, 40*msNs, 50*msNs, renew("b")).
		build(t)
	r := CheckLeaseProtocol(h, Options{})
	expect(t, r, Fail, "grant of", "renew answered ok")
}
