package history

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"reflect"
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
		checkTolerant(t, data, ops, err)
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

// checkTolerant: a Decoder that tolerates a cut end reads what a strict one
// reads, and fails where it fails; it succeeds where the strict one failed
// only on the last line of the text (without its '\n') or on a gzip stream
// cut short, and then it reads the same records and says where the cut is.
func checkTolerant(t *testing.T, data []byte, strict []Op, strictErr error) {
	t.Helper()
	d := NewDecoder(bytes.NewReader(data))
	d.TolerateCut()
	var ops []Op
	var err error
	for {
		var op Op
		if err = d.Decode(&op); err != nil {
			break
		}
		ops = append(ops, op)
	}
	cut := d.Cut()
	switch {
	case strictErr == io.EOF:
		if err != io.EOF || cut != nil || !sameOps(ops, strict) {
			t.Fatalf("tolerant read of a complete history: %d records (strict %d), %v, cut %+v", len(ops), len(strict), err, cut)
		}
	case err != io.EOF:
		// On a gzip stream cut short, the strict read stops at the cut and
		// the tolerant one fails on the partial line before it.
		if (err.Error() != strictErr.Error() && !d.gzip) || !sameOps(ops, strict) {
			t.Fatalf("tolerant: %v after %d records; strict: %v after %d", err, len(ops), strictErr, len(strict))
		}
	default: // only the tolerant read succeeded: a cut
		// The strict read of a gzip stream cut short stops at the cut, even
		// where it comes after a complete last record without its '\n'.
		gzipLast := cut != nil && cut.Gzip && len(ops) == len(strict)+1 && sameOps(ops[:len(strict)], strict)
		if cut == nil || !sameOps(ops, strict) && !gzipLast {
			t.Fatalf("tolerant read succeeded where the strict one failed (%v) without a cut, or with other records: %d vs %d", strictErr, len(ops), len(strict))
		}
		var e *Error
		if !cut.Gzip {
			if !errors.As(strictErr, &e) || e.Line != cut.Line || bytes.HasSuffix(data, []byte("\n")) || cut.Line != bytes.Count(data, []byte("\n"))+1 {
				t.Fatalf("cut %+v of a plain text, strict error %v", cut, strictErr)
			}
		}
	}
}

// sameOps: the same records (nil and empty alike).
func sameOps(a, b []Op) bool { return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b)) }
