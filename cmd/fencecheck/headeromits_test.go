package main

import (
	"strings"
	"testing"
)

// A header whose only property has nothing to check (N/A) over a history
// with two holders at once: the header alone must not decide the verdict
// (issue 30, rule 8; review). Nothing checked is UNKNOWN, never PASS, and
// fencecheck names the checkers that apply to the history but that the
// header left out.
const headerOmitsHistory = `{"header":"coordtorture","version":1,"scenario":"corpus","properties":[{"checker":"leaks","expect":"must-hold","not_checked":"deployment not scanned"}]}
{"i":1,"proc":0,"type":"invoke","f":"acquire","key":"k","t":1000000,"ttl_ms":1000}
{"i":2,"proc":0,"type":"ok","t":2000000,"owner":"A","token":1}
{"i":3,"proc":1,"type":"invoke","f":"acquire","key":"k","t":3000000,"ttl_ms":1000}
{"i":4,"proc":1,"type":"ok","t":4000000,"owner":"B","token":2}
`

func TestHeaderAloneDecidesNothing(t *testing.T) {
	code, out, errs := runCLI(t, "", writeFile(t, "omits.jsonl", headerOmitsHistory))
	if code != 2 || !strings.Contains(out, "verdict: UNKNOWN") {
		t.Fatalf("every property N/A: exit %d, want 2 (UNKNOWN: nothing checked)\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "exclusion") || !strings.Contains(out, "not in the header") {
		t.Fatalf("the checkers the header left out are not named:\n%s", out)
	}
}
