package history_test

import (
	"bytes"
	"compress/gzip"
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

// BenchmarkReadMillionLinesGzip is BenchmarkReadMillionLines on the history
// gzip-compressed, as coordtorture writes histories (MB/s counts the text).
func BenchmarkReadMillionLinesGzip(b *testing.B) {
	data := millionLines()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		h, err := history.Read(bytes.NewReader(buf.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		if len(h.Records) != 1_000_000 {
			b.Fatalf("%d records", len(h.Records))
		}
	}
}
