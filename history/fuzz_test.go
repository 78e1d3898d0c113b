package history

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary input to the Decoder: it must never panic, must
// fail only with an *Error carrying a valid line and column (or io.EOF; an
// input that starts like gzip may also fail in its decompression), and
// every line it looks at must parse the same as with encoding/json. What it
// accepts must survive an encode/decode round trip unchanged.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(strings.Join(sampleLines, "\n")))
	for _, l := range agreementLines {
		f.Add([]byte(l))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Join(sampleLines, "\n")))
	zw.Close()
	f.Add(gz.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(bytes.NewReader(data))
		var ops []Op
		var err error
		for {
			var op Op
			if err = d.Decode(&op); err != nil {
				break
			}
			ops = append(ops, op)
		}
		compressed := len(data) > 0 && data[0] == gzipMagic[0]
		if err != io.EOF && !compressed {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			if e.Line < 1 || e.Line > bytes.Count(data, []byte("\n"))+1 || e.Column < 1 {
				t.Fatalf("bad position in %v", e)
			}
		}
		if len(data) <= MaxLineBytes && !compressed {
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, MaxLineBytes+1)
			for sc.Scan() {
				if line := sc.Bytes(); !isBlank(line) {
					checkAgreement(t, line)
				}
			}
		}
		if err == io.EOF {
			var buf bytes.Buffer
			e := NewEncoder(&buf)
			for k := range ops {
				if err := e.Encode(&ops[k]); err != nil {
					t.Fatal(err)
				}
			}
			back, err := ReadAll(&buf)
			if err != nil {
				t.Fatalf("re-decoding the encoder's output: %v", err)
			}
			if len(back) != len(ops) {
				t.Fatalf("%d records back, want %d", len(back), len(ops))
			}
			for k := range ops {
				if back[k] != normalized(ops[k]) {
					t.Fatalf("record %d: %+v became %+v", k, ops[k], back[k])
				}
			}
			if _, err := New(ops); err != nil {
				t.Fatalf("New rejects what the Decoder accepted: %v", err)
			}
		}
	})
}
