package models

import (
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

func readJSONL(t *testing.T, s string) *history.History {
	t.Helper()
	h, err := history.Read(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestTwoUncertainAcquisitionsSameOwner: two uncertain acquisitions with the
// same owner (a resend, or a client id used as owner) proven by a later
// verify. Either may have taken the lease: the earliest may have, and then
// its lease expired at its invocation + ttl, so a grant to another holder
// after that is legal (exclusion used the later invocation and FAILed it).
// A grant before the earliest invocation + ttl, after the proof, is still
// an overlap.
func TestTwoUncertainAcquisitionsSameOwner(t *testing.T) {
	const base = `{"i":1,"proc":0,"type":"invoke","f":"acquire","key":"k","t":0,"ttl_ms":100,"owner":"A"}
{"i":2,"proc":0,"type":"info","t":5000000,"err":"i/o timeout"}
{"i":3,"proc":0,"type":"invoke","f":"acquire","key":"k","t":50000000,"ttl_ms":100,"owner":"A"}
{"i":4,"proc":0,"type":"info","t":55000000,"err":"i/o timeout"}
{"i":5,"proc":0,"type":"invoke","f":"verify","key":"k","t":60000000,"owner":"A"}
{"i":6,"proc":0,"type":"ok","t":61000000,"value":"true"}
`
	legal := base + `{"i":7,"proc":1,"type":"invoke","f":"acquire","key":"k","t":110000000,"ttl_ms":100}
{"i":8,"proc":1,"type":"ok","t":111000000,"owner":"B"}
`
	expect(t, CheckExclusion(readJSONL(t, legal), Options{}), Pass)
	illegal := base + `{"i":7,"proc":1,"type":"invoke","f":"acquire","key":"k","t":80000000,"ttl_ms":100}
{"i":8,"proc":1,"type":"ok","t":81000000,"owner":"B"}
`
	expect(t, CheckExclusion(readJSONL(t, illegal), Options{}), Fail, "overlap")
}
