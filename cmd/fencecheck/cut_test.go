package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gz compresses text as one gzip stream.
func gz(t *testing.T, text string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeBytes(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// cutRecord is what a writer that crashed in the middle of record 11 left.
const cutRecord = `{"i":11,"proc":1,"type":"invoke","f":"acq`

// TestGzipRoundTrip: a gzip-compressed history is checked as its text is,
// from a file (whatever it is called: the magic bytes decide) and from
// standard input, and a failing one still fails.
func TestGzipRoundTrip(t *testing.T) {
	_, plain, _ := runCLI(t, "", writeFile(t, "good.jsonl", goodHistory))
	for _, name := range []string{"good.jsonl.gz", "good.jsonl"} {
		code, out, errs := runCLI(t, "", writeBytes(t, name, gz(t, goodHistory)))
		if code != 0 || errs != "" {
			t.Fatalf("%s: exit %d\n%s%s", name, code, out, errs)
		}
		if got, want := out[strings.IndexByte(out, '\n'):], plain[strings.IndexByte(plain, '\n'):]; got != want {
			t.Errorf("%s: the verdicts differ from the plain file's:\n%s\nplain:\n%s", name, out, plain)
		}
		if !strings.Contains(out, "10 records") {
			t.Errorf("%s: the summary does not count the records:\n%s", name, out)
		}
	}
	code, out, errs := runCLI(t, string(gz(t, badHistory)))
	if code != 1 || !strings.Contains(out, "FAIL    fenced-resource") {
		t.Errorf("a failing history on stdin: exit %d\n%s%s", code, out, errs)
	}
}

// TestCutLastLine: a history whose writer stopped in the middle of its last
// record is checked without that record, says so, and counts what it read;
// plain, gzip-compressed, and a gzip stream that stops before its end.
func TestCutLastLine(t *testing.T) {
	check := func(t *testing.T, path string, records int, wantCut ...string) {
		t.Helper()
		code, out, errs := runCLI(t, "", path)
		if code != 0 {
			t.Fatalf("exit %d, want 0 (the records before the cut pass)\n%s%s", code, out, errs)
		}
		for _, want := range append(wantCut, fmt.Sprintf(": %d records", records), "PASS    fenced-resource", "PASS    exclusion") {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		code, out, _ = runCLI(t, "", "--json", path)
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
			t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
		}
		if f := rep.Files[0]; f.Records != records || f.Cut == nil || f.Error != "" {
			t.Errorf("--json: %+v", f)
		}
	}
	t.Run("plain", func(t *testing.T) {
		check(t, writeFile(t, "cut.jsonl", goodHistory+cutRecord), 10, "last record cut at line 11", "ignored")
	})
	t.Run("gzip", func(t *testing.T) {
		check(t, writeBytes(t, "cut.jsonl.gz", gz(t, goodHistory+cutRecord)), 10, "last record cut at line 11", "ignored")
	})
	t.Run("gzip-stream-cut", func(t *testing.T) {
		// The stream as a crashed writer leaves it: flushed after record 10,
		// then none, part or all of the next block (record 11), no trailer.
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(goodHistory))
		zw.Flush()
		n := b.Len()
		zw.Write([]byte(`{"i":11,"proc":1,"type":"invoke","f":"acquire","key":"k","t":10000000}` + "\n"))
		zw.Flush()
		check(t, writeBytes(t, "cut.jsonl.gz", b.Bytes()[:n]), 10, "gzip stream cut short after line 10")
		check(t, writeBytes(t, "cut.jsonl.gz", b.Bytes()[:n+(b.Len()-n)/2]), 10, "gzip stream cut short")
		check(t, writeBytes(t, "cut.jsonl.gz", b.Bytes()), 11, "gzip stream cut short after line 11")
	})
}

// TestMalformedStaysAnError: only a last line without its end is forgiven;
// a malformed line before it, a complete but invalid last line, and a cut
// line followed by a newline (a complete line) are errors, as are a gzip
// stream whose checksum does not match and one corrupted in the middle.
func TestMalformedStaysAnError(t *testing.T) {
	lines := strings.SplitAfter(goodHistory, "\n")
	for name, text := range map[string]string{
		"a malformed line before the cut": strings.Join(lines[:3], "") + cutRecord + "\n" + strings.Join(lines[3:], "") + cutRecord,
		"an invalid complete last line":   goodHistory + `{"i":11,"proc":1,"type":"maybe","f":"x","t":10000000}`,
		"a cut line with its newline":     goodHistory + cutRecord + "\n",
	} {
		for _, data := range [][]byte{[]byte(text), gz(t, text)} {
			code, out, errs := runCLI(t, "", writeBytes(t, "bad.jsonl", data))
			if code != 2 || !strings.Contains(errs, "line ") || strings.Contains(out, "cut") {
				t.Errorf("%s: exit %d, want 2 with the line\n%s%s", name, code, out, errs)
			}
		}
	}
	data := gz(t, goodHistory)
	data[len(data)-8] ^= 0xff // the CRC-32 of the trailer
	if code, out, errs := runCLI(t, "", writeBytes(t, "crc.jsonl.gz", data)); code != 2 || !strings.Contains(errs, "gzip: invalid checksum") {
		t.Errorf("a gzip stream with a wrong checksum: exit %d\n%s%s", code, out, errs)
	}
	data = gz(t, goodHistory)
	data[len(data)/2] ^= 0xff
	if code, out, errs := runCLI(t, "", writeBytes(t, "corrupt.jsonl.gz", data)); code != 2 || strings.Contains(out, "cut") {
		t.Errorf("a corrupt gzip stream: exit %d\n%s%s", code, out, errs)
	}
}
