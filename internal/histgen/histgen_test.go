package histgen

import (
	"bytes"
	"testing"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
)

// TestLockCyclesPass: the generated histories are well formed, have the
// promised number of lines, and pass every checker that applies (five: the
// benchmark measures them all).
func TestLockCyclesPass(t *testing.T) {
	for _, c := range []LockCycles{
		{Cycles: 2000, Procs: 4, Contenders: 2, Seed: 1},
		{Cycles: 2000, Procs: 3, Contenders: 2, InfoEvery: 50, Seed: 2},
	} {
		data := c.Generate()
		h, err := history.Read(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Records) != c.Lines() || bytes.Count(data, []byte("\n")) != c.Lines() {
			t.Fatalf("%d records, %d lines, want %d", len(h.Records), bytes.Count(data, []byte("\n")), c.Lines())
		}
		checkers := models.Applicable(h)
		if len(checkers) != 5 {
			t.Errorf("%d checkers apply, want 5", len(checkers))
		}
		for _, r := range models.Run(h, checkers, models.Options{DenseTokens: true}) {
			if r.Verdict != models.Pass {
				t.Errorf("%+v: %s", c, r.String())
			}
		}
	}
	if n := MillionLines.Lines(); n != 1_000_000 {
		t.Errorf("MillionLines has %d lines", n)
	}
}
