package history

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// shrinking is a ReadSeeker whose first pass (the line count) sees only the
// first cut bytes, as if the file grew after it was counted.
type shrinking struct {
	*bytes.Reader
	cut    int
	passes int
}

func (s *shrinking) Read(p []byte) (int, error) {
	if s.passes == 0 {
		pos := int(s.Size()) - s.Len()
		if pos >= s.cut {
			return 0, io.EOF
		}
		p = p[:min(len(p), s.cut-pos)]
	}
	return s.Reader.Read(p)
}

func (s *shrinking) Seek(off int64, whence int) (int64, error) {
	if whence == io.SeekStart {
		s.passes++
	}
	return s.Reader.Seek(off, whence)
}

// failingSeeker cannot go back after the count.
type failingSeeker struct {
	*bytes.Reader
	seeks int
}

func (f *failingSeeker) Seek(off int64, whence int) (int64, error) {
	if f.seeks++; f.seeks > 1 {
		return 0, errors.New("cannot seek")
	}
	return f.Reader.Seek(off, whence)
}

// TestReadAllSizes: ReadAll sizes its result from a line count when it can
// read its input twice, and reads the same records in every case: a
// Seeker (from where it stands), a reader that is not one, a pipe, an input
// that grew after the count, a last line without '\n', blank lines, and a
// malformed line (the records before it).
func TestReadAllSizes(t *testing.T) {
	data := benchHistory(3000)
	want, err := ReadAll(io.MultiReader(bytes.NewReader(data))) // not a Seeker
	if err != nil || len(want) != 3000 {
		t.Fatalf("%d records, %v", len(want), err)
	}
	same := func(name string, got []Op, err error, want []Op) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %d records differ from %d", name, len(got), len(want))
		}
	}
	got, err := ReadAll(bytes.NewReader(data))
	same("seeker", got, err, want)
	if cap(got) > len(got)+1 {
		t.Errorf("capacity %d for %d records: not sized from the count", cap(got), len(got))
	}
	// From the middle: the count starts where the reader stands.
	mid := 0 // after 1500 lines: between operations
	for n := 0; n < 1500; n++ {
		mid += bytes.IndexByte(data[mid:], '\n') + 1
	}
	r := bytes.NewReader(data)
	if _, err := r.Seek(int64(mid), io.SeekStart); err != nil {
		t.Fatal(err)
	}
	tail, err := ReadAll(r)
	same("from the middle", tail, err, want[len(want)-len(tail):])
	if len(tail) == 0 || len(tail) == len(want) {
		t.Fatalf("%d records from the middle", len(tail))
	}
	got, err = ReadAll(&shrinking{Reader: bytes.NewReader(data), cut: len(data) / 3})
	same("grew after the count", got, err, want)
	got, err = ReadAll(bytes.NewReader(bytes.TrimSuffix(data, []byte("\n"))))
	same("no final newline", got, err, want)
	got, err = ReadAll(strings.NewReader("\n  \n" + strings.ReplaceAll(string(data), "}\n", "}\n\n")))
	same("blank lines", got, err, want)
	if _, err := ReadAll(&failingSeeker{Reader: bytes.NewReader(data)}); err == nil || !strings.Contains(err.Error(), "cannot seek") {
		t.Errorf("a seeker that cannot go back: %v", err)
	}
	bad := append(bytes.Clone(data[:mid]), []byte("{\"i\":\n")...)
	got, err = ReadAll(bytes.NewReader(bad))
	var e *Error
	if !errors.As(err, &e) || !reflect.DeepEqual(got, want[:len(want)-len(tail)]) {
		t.Errorf("malformed line: %d records, %v", len(got), err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { pw.Write(data); pw.Close() }()
	got, err = ReadAll(pr)
	pr.Close()
	same("pipe", got, err, want)
}
