package models

import (
	"bytes"
	"sync"
	"testing"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/internal/histgen"
)

var millionLineHistory = sync.OnceValues(func() (*history.History, error) {
	return history.Read(bytes.NewReader(histgen.MillionLines.Generate()))
})

// BenchmarkCheckersMillionLines runs each checker that applies to issue
// 14's million-line history (histgen.MillionLines: 100,000 fenced-lock
// cycles on one key with writes) on its own, to see what each costs of
// fencecheck's checking time.
func BenchmarkCheckersMillionLines(b *testing.B) {
	h, err := millionLineHistory()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range Applicable(h) {
		b.Run(c.Name, func(b *testing.B) {
			var r Result
			for k := 0; k < b.N; k++ {
				r = c.Check(h, Options{})
			}
			if r.Verdict != Pass {
				b.Fatal(r.String())
			}
		})
	}
	b.Run("select", func(b *testing.B) {
		for k := 0; k < b.N; k++ {
			if cs, _ := Select(h, ""); len(cs) != 5 {
				b.Fatalf("%d checkers apply", len(cs))
			}
		}
	})
}
