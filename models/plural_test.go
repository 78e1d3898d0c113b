package models

import (
	"regexp"
	"testing"
)

// badText is what a person should not read in a checker's summary or
// evidence: "1 keys" and its kind, "violation(s)", history times in ns.
var badText = regexp.MustCompile(`\b1 (?:[a-z-]+ )?(?:keys|resources|locks|writes|acquisitions|violations|windows|periods|leases|operations|owners|samples|entries|requests|limiters|generations|scans|semaphores|completions|events)\b|\(s\)|\b\d+ns\b`)

// TestCheckerTextReadable: every checker's summary and evidence on histories
// of one operation (and one violation) count in the right plural ("1 key",
// "1 violation") and give times in seconds, so that fencecheck and the
// page, which print them as they are, read right (they said "1 keys",
// "1 violation(s)", "2577644073ns").
func TestCheckerTextReadable(t *testing.T) {
	histories := map[string]*builder{
		"one acquisition":   new(builder).ok(1, m(0), m(1), acq("k", 1, 100)),
		"one write":         new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(2), m(3), write("k", 1)),
		"one stale write":   new(builder).ok(1, m(0), m(10), write("r", 5)).ok(2, m(20), m(30), write("r", 4)),
		"one overlap":       new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(5), m(6), acq("k", 2, 100)),
		"one token too low": new(builder).ok(1, m(0), m(1), acq("k", 2, 100)).ok(2, m(5), m(6), acq("k", 1, 100)),
	}
	for name, b := range histories {
		h := b.build(t)
		for _, c := range Checkers() {
			r := c.Check(h, Options{})
			texts := []string{r.Summary}
			for _, e := range r.Evidence {
				texts = append(texts, e.Msg)
			}
			for _, s := range texts {
				if bad := badText.FindString(s); bad != "" {
					t.Errorf("%s, %s: %q in %q", name, c.Name, bad, s)
				}
			}
		}
	}
	if got := Plural(1, "key") + ", " + Plural(2, "key") + ", " + Plural(1, "entry") + ", " + Plural(3, "entry"); got != "1 key, 2 keys, 1 entry, 3 entries" {
		t.Errorf("plural: %s", got)
	}
	if got := fmtT(3_034_208_000) + " " + fmtT(2_577_644_073) + " " + fmtT(1e9) + " " + fmtT(900); got != "3.034208s 2.577644073s 1.000s 0.0000009s" {
		t.Errorf("fmtT: %s", got)
	}
}
