package models

import (
	"path/filepath"
	"testing"
)

// TestTokenNeverGivenNeverHazard: a write with a token its process was never
// given (rule 11 of issue 30) is FAIL even under a may-show-hazard
// fenced-resource property with a proven loss before it: a lost write can
// hand a token out twice, but never give a process a token it did not ask
// for.
func TestTokenNeverGivenNeverHazard(t *testing.T) {
	for _, f := range []string{"resource-token-of-another-process.jsonl", "resource-token-nobody-was-given.jsonl", "resource-token-before-it-was-given.jsonl"} {
		h := readCorpus(t, filepath.Join("testdata", "corpus", f))
		r := CheckFencedResource(h, Options{})
		if r.Verdict != Fail {
			t.Fatalf("%s: %s", f, r.Summary)
		}
		p := Property{Checker: "fenced-resource", Expect: MayHazard}
		loss := []Effect{{From: 0, At: 1, What: "dataset lost"}}
		if j := Judge(p, &r, loss); j != JudgedFail {
			t.Errorf("%s: judged %s after a proven loss, want FAIL: %s", f, j, r.Summary)
		}
	}
}
