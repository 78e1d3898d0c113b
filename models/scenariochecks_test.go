package models

import (
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// claim is a Redlock acquisition of a ttlMs lease claiming validityUs of
// validity, with driftUs declared for drift.
func claim(ttlMs, validityUs, driftUs int64) history.Op {
	return history.Op{F: history.FAcquire, Key: "redlock", Owner: "o", TTLMs: ttlMs, Count: validityUs, DriftUs: driftUs}
}

// crashedHolder: process 0 took a permit without expiry and crashed; the
// run read it back from the server with reply.
func crashedHolder(reply string) *builder {
	b := &builder{header: &history.Header{Header: history.HeaderMagic, Properties: []history.HeaderProperty{
		{Checker: "no-expiry-kept", Expect: "must-hold", Reads: []history.ServerRead{{Node: "n1", Key: "semaphore", Member: "A", Reply: reply}}}}}}
	return b.ok(0, 0, 10, history.Op{F: history.FSemAcquire, Key: "semaphore", Owner: "A", Capacity: 2})
}

// untouchedReads: the run read the lease hash on n1 with reply (EXISTS).
func untouchedReads(reply string) *builder {
	return &builder{header: &history.Header{Header: history.HeaderMagic, Properties: []history.HeaderProperty{
		{Checker: "refused-untouched", Expect: "must-hold", Reads: []history.ServerRead{{Node: "n1", Key: "leases", Reply: reply}}}}}}
}

// TestRedlockValidity: each claim is held to ttl − drift and to ttl − drift
// − elapsed + the scheduling slack, from the history alone; a claim at
// either bound is legal; a history declaring no drift allowance is held to
// none; a header changes nothing.
func TestRedlockValidity(t *testing.T) {
	slack := RedlockElapsedSlack.Microseconds()
	for _, c := range []struct {
		name     string
		took     int64 // ns
		claim    int64 // µs
		drift    int64 // µs
		want     Verdict
		contains string
	}{
		{"at ttl − drift, quick", m(1), 493000, 7000, Pass, ""},
		{"over ttl − drift", m(1), 493001, 7000, Fail, "more than ttl − drift allowance (493ms"},
		{"at ttl − drift − elapsed + slack", m(100), 493000 - 100000 + slack, 7000, Pass, ""},
		{"over ttl − drift − elapsed + slack (forgot the elapsed time)", m(100), 493000 - 100000 + slack + 1, 7000, Fail, "took 100ms to acquire"},
		{"no drift declared: held to ttl", m(1), 500000, 0, Pass, ""},
		{"no drift declared, over ttl", m(1), 500001, 0, Fail, "the allowance declared 0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := new(builder).ok(1, m(10), m(10)+c.took, claim(500, c.claim, c.drift)).
				ok(2, m(20), m(21), history.Op{F: history.FAcquire, Key: "redlock", Owner: "p", TTLMs: 500}) // no claim: not counted
			r := CheckRedlockValidity(b.build(t), Options{})
			expect(t, r, c.want, c.contains)
			if r.Ops != 1 {
				t.Errorf("%d claims counted, want 1", r.Ops)
			}
			b.header = &history.Header{Header: history.HeaderMagic, Options: HeaderOptions(Options{Drift: 1e9})}
			if h := CheckRedlockValidity(b.build(t), Options{Drift: 1e9}); h.Verdict != r.Verdict {
				t.Errorf("with a header and options: %s, without: %s", h.Verdict, r.Verdict)
			}
		})
	}
	r := CheckRedlockValidity(new(builder).ok(1, 0, 10, acq("k", 1, 100)).build(t), Options{})
	expect(t, r, Unknown, "nothing to check")
}

// TestCompletionCutOff: latch/lost-notifications is UNKNOWN unless a count
// reached zero inside a proven cut (from the cut's completion to the start
// of a heal that found the waiters' tracking connections closed); a zero
// outside every cut, or inside an unproven one, checks nothing.
func TestCompletionCutOff(t *testing.T) {
	nem := func(kind string, t0, t1 int64, value string) history.Operation {
		return history.Operation{Op: history.Op{F: history.FNemesis, Key: kind, Type: history.OK, T: t0, Value: value}, Return: t1, Done: true}
	}
	zero := func(t0, t1 int64) history.Operation {
		return history.Operation{Op: history.Op{F: history.FLatchCountDown, Key: "l", Type: history.OK, T: t0, Count: 0}, Return: t1, Done: true}
	}
	one := func(t0, t1 int64) history.Operation {
		return history.Operation{Op: history.Op{F: history.FLatchCountDown, Key: "l", Type: history.OK, T: t0, Count: 1}, Return: t1, Done: true}
	}
	proven := "heal (2 of the waiters' 3 tracking connections closed by the cut)"
	for _, c := range []struct {
		name string
		ops  []history.Operation
		want Verdict
	}{
		{"zero inside a proven cut", []history.Operation{nem(NemesisFault, 100, 110, "cut"), zero(120, 130), nem(NemesisHeal, 400, 420, proven)}, Pass},
		{"no cut", []history.Operation{zero(120, 130)}, Unknown},
		{"zero before the cut was in place", []history.Operation{nem(NemesisFault, 100, 110, "cut"), zero(105, 130), nem(NemesisHeal, 400, 420, proven)}, Unknown},
		{"zero answered after the heal began", []history.Operation{nem(NemesisFault, 100, 110, "cut"), zero(120, 410), nem(NemesisHeal, 400, 420, proven)}, Unknown},
		{"cut not proven", []history.Operation{nem(NemesisFault, 100, 110, "cut"), zero(120, 130), nem(NemesisHeal, 400, 420, "heal")}, Unknown},
		{"only a non-zero count-down in the cut", []history.Operation{nem(NemesisFault, 100, 110, "cut"), one(120, 130), nem(NemesisHeal, 400, 420, proven)}, Unknown},
	} {
		r := CheckCompletionCutOff(&history.History{Ops: c.ops}, Options{})
		if r.Verdict != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, r.Verdict, r.Summary, c.want)
		}
	}
}

// TestServerReads: the checks that need the servers' state after the run
// judge the reads the header carries; without them (no header), or with a
// read that failed, they are UNKNOWN and say what they lack, unless the
// history alone FAILs them.
func TestServerReads(t *testing.T) {
	b := crashedHolder(PermitKept)
	b.header = nil
	expect(t, CheckNoExpiryKept(b.build(t), Options{}), Unknown, "lacks the server's state after the run")
	expect(t, CheckNoExpiryKept(crashedHolder(PermitAbsent).build(t), Options{}), Fail, "was gone from the server")
	b = crashedHolder("")
	b.header.Properties[0].Reads[0].Err = "i/o timeout"
	expect(t, CheckNoExpiryKept(b.build(t), Options{}), Unknown, "could not read it: i/o timeout")
	// Released: nothing crashed, nothing checked.
	b = crashedHolder(PermitKept).ok(0, 20, 30, owned(rel("semaphore"), "A"))
	expect(t, CheckNoExpiryKept(b.build(t), Options{}), Unknown, "no holder crashed")

	refused := history.Op{F: history.FAcquire, Key: "leases", Field: "a", TTLMs: 100, Err: "no hash-field expiration (7.4+)"}
	b = untouchedReads("0").fail(1, 0, 10, refused)
	b.header = nil
	expect(t, CheckRefusedUntouched(b.build(t), Options{}), Unknown, "lacks the servers' state after the run")
	b = untouchedReads("0").ok(1, 0, 10, history.Op{F: history.FAcquire, Key: "leases", Field: "a", TTLMs: 100})
	b.header = nil
	expect(t, CheckRefusedUntouched(b.build(t), Options{}), Fail, "acquisition was ok")
	r := CheckRefusedUntouched(untouchedReads("1").fail(1, 0, 10, refused).build(t), Options{})
	if r.Verdict != Fail || r.Kinds[KindTouched] != 1 || !strings.Contains(r.Summary, "exists after the refusals") {
		t.Errorf("hash written: %s", r.String())
	}
	bad := refused
	bad.Err = "ERR unknown command 'HPEXPIRE'"
	expect(t, CheckRefusedUntouched(untouchedReads("0").fail(1, 0, 10, bad).build(t), Options{}), Fail, "does not name the missing feature")
}

// TestNotChecked: a run's reason for not checking a property makes it N/A
// only when the history holds nothing its checker reads; a history that
// holds something is checked, whatever the reason says.
func TestNotChecked(t *testing.T) {
	noTokens := new(builder).ok(1, 0, 10, owned(acq("k", 0, 100), "A")).build(t)
	r, j, ok := CheckProperty(noTokens, Property{Checker: "token-order"}, "hands out no fencing tokens", Options{}, nil)
	if !ok || j != JudgedNA || r.Summary != "hands out no fencing tokens" {
		t.Errorf("no tokens: %s %s", j, r.String())
	}
	regressed := new(builder).ok(1, 0, 10, acq("k", 7, 100)).ok(2, m(200), m(201), acq("k", 3, 100)).build(t)
	if _, j, _ := CheckProperty(regressed, Property{Checker: "token-order"}, "hands out no fencing tokens", Options{}, nil); j != JudgedFail {
		t.Errorf("tokens regressed, said to have none: %s, want FAIL", j)
	}
	if _, j, _ := CheckProperty(noTokens, Property{Checker: "exclusion"}, "no reason holds", Options{}, nil); j != JudgedPass {
		t.Errorf("a reason for a checker that has something to check: %s, want PASS (checked)", j)
	}
	if _, j, _ := CheckProperty(noTokens, Property{Checker: "leaks"}, "", Options{}, nil); j != JudgedUnknown {
		t.Errorf("no scan, no reason: %s, want UNKNOWN", j)
	}
	if _, j, ok := CheckProperty(noTokens, Property{Checker: "nope"}, "", Options{}, nil); ok || j != JudgedUnknown {
		t.Errorf("unknown checker: %s %v", j, ok)
	}
}
