package history

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fileHeader is a header as coordtorture writes it.
var fileHeader = &Header{Scenario: "fenced-lock/baseline", Impl: "prim", Build: "redis-8.0", Seed: 7,
	Properties: []HeaderProperty{{Checker: "exclusion", Expect: "must-hold"}}}

// TestWriteFileRoundTrip: WriteFile writes gzip for a .gz name and text
// otherwise, the same text either way; Read gives back the header and the
// records from both, from a file, from a reader that cannot seek and from a
// compressed file whatever its name; NewTextReader gives back the text.
func TestWriteFileRoundTrip(t *testing.T) {
	recs, err := ReadAll(bytes.NewReader(benchHistory(5000)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plain, packed := filepath.Join(dir, "h.jsonl"), filepath.Join(dir, "h.jsonl.gz")
	for _, p := range []string{plain, packed} {
		if err := WriteFile(p, fileHeader, recs); err != nil {
			t.Fatal(err)
		}
	}
	text, _ := os.ReadFile(plain)
	gz, _ := os.ReadFile(packed)
	if !bytes.HasPrefix(gz, gzipMagic) || bytes.HasPrefix(text, gzipMagic) {
		t.Fatalf("gzip magic: .gz %x, .jsonl %x", gz[:2], text[:2])
	}
	if len(gz)*3 > len(text) {
		t.Errorf("compressed %d bytes of %d: less than 3×", len(gz), len(text))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if unz, err := io.ReadAll(zr); err != nil || !bytes.Equal(unz, text) {
		t.Fatalf("the .gz holds other text than the .jsonl (%v)", err)
	}
	if zr.Name != "h.jsonl" {
		t.Errorf("gzip's name field %q", zr.Name)
	}
	renamed := filepath.Join(dir, "renamed.jsonl") // gzip under a plain name: the magic decides
	if err := os.WriteFile(renamed, gz, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{plain, packed, renamed} {
		for _, seek := range []bool{true, false} {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			var r io.Reader = f
			if !seek {
				r = io.MultiReader(f) // not a Seeker: no line count
			}
			h, err := Read(r)
			f.Close()
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if !reflect.DeepEqual(h.Records, recs) || h.Header == nil || h.Header.Seed != 7 || h.Cut != nil {
				t.Fatalf("%s (seeker %v): %d records, header %+v, cut %v", p, seek, len(h.Records), h.Header, h.Cut)
			}
		}
		f, _ := os.Open(p)
		tr, err := NewTextReader(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(tr)
		f.Close()
		if err != nil || !bytes.Equal(got, text) {
			t.Errorf("NewTextReader(%s): %d bytes, %v", p, len(got), err)
		}
	}
	// No header, no records.
	empty := filepath.Join(dir, "empty.jsonl.gz")
	if err := WriteFile(empty, nil, nil); err != nil {
		t.Fatal(err)
	}
	if f, _ := os.Open(empty); f != nil {
		h, err := Read(f)
		f.Close()
		if err != nil || len(h.Records) != 0 || h.Header != nil {
			t.Errorf("empty: %+v %v", h, err)
		}
	}
}

// TestTolerateCutEveryPrefix: a history whose last line is any proper prefix
// of a record (what a writer that stopped in the middle of it leaves) is an
// error for Read, and for ReadTolerant the records before it with Cut naming
// that line; plain and compressed alike.
func TestTolerateCutEveryPrefix(t *testing.T) {
	head := strings.Join(sampleLines[:5], "\n") + "\n"
	lasts := []string{
		sampleLines[5],
		`{"i":23,"proc":3,"type":"info","f":"acquire","key":"k\u00e9\"\\\ud83d\ude00","owner":"x","err":"é","x":[1,{"y":null}],"t":1600000}`,
		`{"header":"not on line 1"`,
	}
	for _, last := range lasts {
		for n := 1; n < len(last); n++ {
			text := head + last[:n]
			if isBlank([]byte(last[:n])) {
				continue
			}
			for _, data := range [][]byte{[]byte(text), gzipped(t, text)} {
				if _, err := Read(bytes.NewReader(data)); err == nil {
					t.Fatalf("Read accepts a cut last line %q", last[:n])
				}
				h, err := ReadTolerant(bytes.NewReader(data))
				if err != nil {
					t.Fatalf("ReadTolerant, last line %q: %v", last[:n], err)
				}
				if len(h.Records) != 5 || h.Cut == nil || h.Cut.Line != 6 || h.Cut.Bytes != n || h.Cut.Lines != 5 || h.Cut.Gzip {
					t.Fatalf("last line %q: %d records, cut %+v", last[:n], len(h.Records), h.Cut)
				}
			}
		}
	}
	// The complete line, without its '\n', is a record.
	h, err := ReadTolerant(strings.NewReader(head + sampleLines[5]))
	if err != nil || len(h.Records) != 6 || h.Cut != nil {
		t.Fatalf("complete last line: %d records, cut %v, %v", len(h.Records), h.Cut, err)
	}
	// A malformed line before the last, or a last line that is complete but
	// wrong, stays an error.
	for _, text := range []string{
		sampleLines[0] + "\n" + sampleLines[1][:20] + "\n" + sampleLines[2][:20],
		head + `{"i":23,"proc":3,"type":"maybe","t":1600000}`,
		head + `{"i":23,"proc":3,"type":"ok","t":1600000,}`,
		head + `{"i":23,"proc":3,"type":"ok","f":"x","key":"\u00zz`,
		head + `{"i":23,"proc":3,"type":"ok","t":12.5`,
	} {
		var e *Error
		if _, err := ReadTolerant(strings.NewReader(text)); !errors.As(err, &e) {
			t.Errorf("ReadTolerant accepts %q: %v", text[len(text)-30:], err)
		}
	}
}

// TestTolerateCutGzipStream: a gzip stream cut at any byte is, for
// ReadTolerant, a prefix of the history with Cut saying the stream was cut
// (from the first byte on); for Read, an error unless nothing is missing.
func TestTolerateCutGzipStream(t *testing.T) {
	text := strings.Join(sampleLines, "\n") + "\n"
	want, err := ReadAll(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	data := gzipped(t, text)
	for n := 1; n < len(data); n++ {
		h, err := ReadTolerant(bytes.NewReader(data[:n]))
		if err != nil {
			t.Fatalf("cut at byte %d of %d: %v", n, len(data), err)
		}
		if h.Cut == nil || !h.Cut.Gzip || !reflect.DeepEqual(h.Records, want[:len(h.Records)]) {
			t.Fatalf("cut at byte %d of %d: %d records, cut %+v", n, len(data), len(h.Records), h.Cut)
		}
		if _, err := Read(bytes.NewReader(data[:n])); err == nil || !strings.Contains(err.Error(), "gzip") {
			t.Fatalf("Read of a stream cut at byte %d of %d: %v", n, len(data), err)
		}
	}
	h, err := ReadTolerant(bytes.NewReader(data))
	if err != nil || h.Cut != nil || len(h.Records) != len(want) {
		t.Fatalf("the whole stream: %d records, cut %v, %v", len(h.Records), h.Cut, err)
	}
	// The Decoder on its own streams the decompression: the same records,
	// the same cut.
	for n := 1; n <= len(data); n++ {
		h, err := ReadTolerant(bytes.NewReader(data[:n]))
		if err != nil {
			t.Fatal(err)
		}
		d := NewDecoder(bytes.NewReader(data[:n]))
		d.TolerateCut()
		var got []Op
		for {
			var op Op
			if err = d.Decode(&op); err != nil {
				break
			}
			got = append(got, op)
		}
		if err != io.EOF || !reflect.DeepEqual(got, h.Records) && len(got)+len(h.Records) > 0 || !reflect.DeepEqual(d.Cut(), h.Cut) {
			t.Fatalf("Decoder, cut at byte %d of %d: %d records (%v), cut %+v; ReadTolerant: %d records, cut %+v",
				n, len(data), len(got), err, d.Cut(), len(h.Records), h.Cut)
		}
	}
}

func gzipped(t *testing.T, text string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := io.WriteString(zw, text); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
