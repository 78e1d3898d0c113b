package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/internal/histgen"
	"github.com/coordtorture/coordtorture/models"
)

var millionLines = sync.OnceValue(func() []byte { return histgen.MillionLines.Generate() })

// BenchmarkFencecheckMillionLines is issue 14's performance target:
// fencecheck on a history of 1,000,000 lines (100,000 fenced-lock cycles on
// one key with writes, 4 processes), every applicable checker on. ns/op is
// the end-to-end run (read the file, decode, check, print); the metrics
// decode-s, check-s and check/decode time the two phases apart (the target:
// under 5 s end to end, check/decode at most 1.5).
func BenchmarkFencecheckMillionLines(b *testing.B) {
	data := millionLines()
	path := filepath.Join(b.TempDir(), "million.jsonl")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	var decode, check time.Duration
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		b.StopTimer()
		d, c := decodeAndCheck(b, path)
		decode += d
		check += c
		b.StartTimer()
		var out, errb bytes.Buffer
		if code := run([]string{path}, nil, &out, &errb); code != exitPass {
			b.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
		}
	}
	b.StopTimer()
	b.ReportMetric(decode.Seconds()/float64(b.N), "decode-s")
	b.ReportMetric(check.Seconds()/float64(b.N), "check-s")
	b.ReportMetric(check.Seconds()/decode.Seconds(), "check/decode")
}

// decodeAndCheck times fencecheck's two phases on the file at path: reading
// and decoding it into a history, and running the applicable checkers.
func decodeAndCheck(tb testing.TB, path string) (decode, check time.Duration) {
	tb.Helper()
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	h, err := history.Read(f)
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	decode = time.Since(start)
	start = time.Now()
	checkers, err := models.Select(h, "")
	if err != nil {
		tb.Fatal(err)
	}
	results := models.Run(h, checkers, models.Options{Timeout: 10 * time.Second})
	check = time.Since(start)
	if len(results) < 5 || models.Worst(results) != models.Pass {
		for _, r := range results {
			tb.Log(r.String())
		}
		tb.Fatalf("%d results, worst %v", len(results), models.Worst(results))
	}
	return decode, check
}
