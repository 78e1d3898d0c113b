package main

import (
	"strings"
	"testing"
)

// oldHeader is a header as coordtorture wrote it before every verdict was
// recomputed offline: the scenario's own checks carried custom: true with
// the verdict and summary the run found, which fencecheck repeated.
func oldHeader(checker, verdict string) string {
	return `{"header":"coordtorture","version":1,"scenario":"x/y","impl":"prim","properties":[` +
		`{"checker":"` + checker + `","expect":"must-hold","custom":true,"verdict":"` + verdict + `","summary":"trust me"}]}` + "\n"
}

// overclaim: a Redlock acquisition on a 500ms lease that took 1ms claims
// 499ms of validity, though its implementation declared a 7ms drift
// allowance: more than ttl − drift.
const overclaim = `{"i":1,"proc":1,"type":"invoke","f":"acquire","key":"redlock","ttl_ms":500,"t":0}
{"i":2,"proc":1,"type":"ok","f":"acquire","key":"redlock","owner":"a","ttl_ms":500,"count":499000,"drift_us":7000,"t":1000000}
`

// TestRecordedVerdictsAreNotRepeated (issue 30, rule 8): a verdict a
// header records is never repeated; every property is recomputed from the
// history (and the data the header carries), or UNKNOWN naming what is
// missing. Each history here contradicts the verdict its header records.
func TestRecordedVerdictsAreNotRepeated(t *testing.T) {
	for _, c := range []struct {
		name, header, body string
		code               int
		want               string
	}{
		{"redlock-validity recorded PASS", oldHeader("redlock-validity", "PASS"), overclaim, 1,
			"FAIL    redlock-validity (must hold): 1 violation: 1 validity (FAIL); first: key \"redlock\": acquisition claimed 499ms of validity on a 500ms lease: more than ttl − drift allowance (493ms"},
		{"stale-write-shown recorded PASS", oldHeader("stale-write-shown", "PASS"),
			`{"i":1,"proc":1,"type":"invoke","f":"write","key":"resource","token":2,"owner":"a","t":0}
{"i":2,"proc":1,"type":"ok","f":"write","key":"resource","t":1000}
{"i":3,"proc":2,"type":"invoke","f":"write","key":"resource","token":3,"owner":"b","t":2000}
{"i":4,"proc":2,"type":"fail","f":"write","key":"resource","t":3000}
`, 1, "FAIL    stale-write-shown (must hold): 1 violation: 1 wrongly-rejected (FAIL); first: key \"resource\": write with token 3 rejected"},
		{"leaks recorded N/A", oldHeader("leaks", "N/A"),
			`{"i":1,"proc":1,"type":"invoke","f":"acquire","key":"k","ttl_ms":100,"t":0}
{"i":2,"proc":1,"type":"ok","f":"acquire","key":"k","owner":"a","token":1,"t":1000000}
{"i":3,"proc":9,"type":"invoke","f":"leak_scan","key":"k","t":900000000}
{"i":4,"proc":9,"type":"ok","f":"leak_scan","key":"k","count":1,"value":"n1: k pttl -1","t":901000000}
`, 1, "FAIL    leaks (must hold): 1 violation: 1 leak (FAIL); first: key \"k\": leak"},
		{"token-order recorded N/A", oldHeader("token-order", "N/A"),
			`{"i":1,"proc":1,"type":"invoke","f":"acquire","key":"k","ttl_ms":100,"t":0}
{"i":2,"proc":1,"type":"ok","f":"acquire","key":"k","owner":"a","token":7,"t":1000000}
{"i":3,"proc":2,"type":"invoke","f":"acquire","key":"k","ttl_ms":100,"t":200000000}
{"i":4,"proc":2,"type":"ok","f":"acquire","key":"k","owner":"b","token":3,"t":201000000}
`, 1, "FAIL    token-order (must hold)"},
		{"completion-cut-off recorded PASS", oldHeader("completion-cut-off", "PASS"),
			`{"i":1,"proc":1,"type":"invoke","f":"latch_count_down","key":"l","gen":1,"t":0}
{"i":2,"proc":1,"type":"ok","f":"latch_count_down","key":"l","t":1000}
`, 2, "UNKNOWN completion-cut-off (must hold): no cut was proven"},
		{"no-expiry-kept recorded PASS", oldHeader("no-expiry-kept", "PASS"),
			`{"i":1,"proc":0,"type":"invoke","f":"sem_acquire","key":"semaphore","capacity":3,"t":0}
{"i":2,"proc":0,"type":"ok","f":"sem_acquire","key":"semaphore","owner":"a","t":1000}
`, 2, "UNKNOWN no-expiry-kept (must hold): undecided: 1 holder crashed holding a permit without expiry, but the history lacks the server's state after the run"},
		{"refused-untouched recorded PASS", oldHeader("refused-untouched", "PASS"),
			`{"i":1,"proc":0,"type":"invoke","f":"acquire","key":"leases","field":"f1","ttl_ms":100,"t":0}
{"i":2,"proc":0,"type":"ok","f":"acquire","key":"leases","owner":"a","t":1000}
`, 1, "FAIL    refused-untouched (must hold): 1 violation: 1 not-refused (FAIL); first: key \"leases\": acquisition was ok on a server without hash-field expiry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCLI(t, c.header+c.body)
			if code != c.code || !strings.Contains(out, c.want) || strings.Contains(out, "trust me") {
				t.Errorf("exit %d, want %d and %q\n%s%s", code, c.code, c.want, out, errs)
			}
		})
	}
}

// TestRedlockValidityWithoutHeader: the claimed validity is judged from the
// history alone (ttl, drift allowance, invocation, completion, claim), with
// a header or without one.
func TestRedlockValidityWithoutHeader(t *testing.T) {
	code, out, _ := runCLI(t, overclaim)
	if code != 1 || !strings.Contains(out, "FAIL    redlock-validity: 1 violation: 1 validity (FAIL)") {
		t.Errorf("without a header: exit %d, want 1\n%s", code, out)
	}
	// 492ms on a 500ms lease that took 1ms with a 7ms allowance: the bound.
	legal := strings.Replace(overclaim, `"count":499000`, `"count":492000`, 1)
	h := `{"header":"coordtorture","properties":[{"checker":"redlock-validity","expect":"must-hold"}]}` + "\n"
	for name, in := range map[string]string{"with a header": h + legal, "without": legal} {
		if code, out, _ := runCLI(t, in, "--check", "redlock-validity"); code != 0 || !strings.Contains(out, "PASS    redlock-validity") {
			t.Errorf("%s, claim at the bound: exit %d, want 0\n%s", name, code, out)
		}
	}
}

// TestHeaderDataRecomputed: what the run found on the servers travels in
// the header as data (not_checked, reads), and fencecheck judges it with the
// history: N/A only when the history indeed holds nothing to check, a
// server read judged like the run judged it.
func TestHeaderDataRecomputed(t *testing.T) {
	na := `{"header":"coordtorture","properties":[{"checker":"exclusion","expect":"must-hold"},` +
		`{"checker":"leaks","expect":"must-hold","not_checked":"an external deployment: the harness does not scan servers it did not start"}]}` + "\n"
	code, out, _ := runCLI(t, na+goodHistory)
	if code != 0 || !strings.Contains(out, "N/A     leaks (must hold): an external deployment") || !strings.Contains(out, "verdict: PASS") {
		t.Errorf("not checked, nothing to check: exit %d, want 0 (N/A)\n%s", code, out)
	}
	scan := `{"i":11,"proc":9,"type":"invoke","f":"leak_scan","key":"k","t":900000000}
{"i":12,"proc":9,"type":"ok","f":"leak_scan","key":"k","count":1,"value":"n1: k pttl -1","t":901000000}
`
	if code, out, _ := runCLI(t, na+goodHistory+scan); code != 1 || !strings.Contains(out, "FAIL    leaks") {
		t.Errorf("not checked, yet a scan in the history: exit %d, want 1\n%s", code, out)
	}
	crashed := `{"i":1,"proc":0,"type":"invoke","f":"sem_acquire","key":"semaphore","capacity":3,"t":0}
{"i":2,"proc":0,"type":"ok","f":"sem_acquire","key":"semaphore","owner":"a","t":1000}
`
	reads := func(reply string) string {
		return `{"header":"coordtorture","properties":[{"checker":"no-expiry-kept","expect":"must-hold","reads":[{"node":"n1","key":"semaphore","member":"a","reply":"` + reply + `"}]}]}` + "\n"
	}
	if code, out, _ := runCLI(t, reads("+Inf")+crashed); code != 0 || !strings.Contains(out, "PASS    no-expiry-kept (must hold): 1 holder crashed holding a permit without expiry, still held") {
		t.Errorf("kept: exit %d, want 0\n%s", code, out)
	}
	if code, out, _ := runCLI(t, reads("absent")+crashed); code != 1 || !strings.Contains(out, "permit a, taken without expiry and never released (it crashed), was gone") {
		t.Errorf("gone: exit %d, want 1\n%s", code, out)
	}
}
