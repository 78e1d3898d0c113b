package history_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/internal/histgen"
)

var millionLines = sync.OnceValue(func() []byte { return histgen.MillionLines.Generate() })

// BenchmarkReadMillionLines decodes and pairs the 1,000,000-line history of
// issue 14's performance target (histgen.MillionLines).
func BenchmarkReadMillionLines(b *testing.B) {
	data := millionLines()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		h, err := history.Read(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if len(h.Records) != 1_000_000 {
			b.Fatalf("%d records", len(h.Records))
		}
	}
}
