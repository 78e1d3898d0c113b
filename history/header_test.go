package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleHeader() *Header {
	return &Header{Version: 1, Scenario: "fenced-lock/kill-restart-noaof", Impl: "prim", Build: "redis-8.0", Seed: 1,
		Clients: 8, DurationNs: 4e9, TTLMs: 500, Nemesis: true, FaultsScheduled: 3,
		Options: json.RawMessage(`{"drift_ns":5000000,"dense_tokens":true}`),
		Properties: []HeaderProperty{
			{Checker: "fenced-resource", Expect: "may-show-hazard", HazardKinds: []string{"token-reused"}},
			{Checker: "progress", Expect: "must-hold"},
			{Checker: "refused-untouched", Expect: "must-hold", Reads: []ServerRead{{Node: "n1", Key: "leases", Reply: "0"}, {Key: "leases", Err: "no node"}}},
			{Checker: "leaks", Expect: "must-hold", NotChecked: "an external deployment"},
		}}
}

// TestHeaderRoundTrip: a header written by AppendHeader is read back whole
// by Read and the Decoder, the records after it are the history, and the
// line numbers of errors still count the header's line.
func TestHeaderRoundTrip(t *testing.T) {
	b, err := AppendHeader(nil, sampleHeader())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`{"header":"coordtorture",`)) || bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("header line %s", b)
	}
	body := strings.Join(sampleLines, "\n") + "\n"
	h, err := Read(strings.NewReader(string(b) + body))
	if err != nil {
		t.Fatal(err)
	}
	want := sampleHeader()
	want.Header = HeaderMagic
	if !reflect.DeepEqual(h.Header, want) {
		t.Fatalf("header\n%+v\nwant\n%+v", h.Header, want)
	}
	plain, err := Read(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Header != nil {
		t.Fatalf("a history without a header has one: %+v", plain.Header)
	}
	if !reflect.DeepEqual(h.Records, plain.Records) || len(h.Ops) != len(plain.Ops) {
		t.Fatalf("the header changed the records: %d ops, want %d", len(h.Ops), len(plain.Ops))
	}
	// Errors after the header keep their line numbers.
	bad := string(b) + sampleLines[0] + "\n" + `{"i":0,"proc":1,"type":"ok","t":0}` + "\n"
	_, err = Read(strings.NewReader(bad))
	var e *Error
	if !errors.As(err, &e) || e.Line != 3 {
		t.Fatalf("error %v, want one on line 3", err)
	}
	// A header alone is an empty history.
	d := NewDecoder(bytes.NewReader(b))
	var op Op
	if err := d.Decode(&op); err.Error() != "EOF" || d.Header() == nil || d.Header().Scenario != want.Scenario {
		t.Fatalf("header only: %v %+v", err, d.Header())
	}
}

// TestHeaderRejected: a malformed header is an error on line 1; a header
// anywhere but the first line is not a record either.
func TestHeaderRejected(t *testing.T) {
	rec := sampleLines[0] + "\n"
	for name, first := range map[string]string{
		"not a string":   `{"header":1}`,
		"empty":          `{"header":""}`,
		"bad expect":     `{"header":"coordtorture","properties":[{"checker":"exclusion","expect":"maybe"}]}`,
		"no checker":     `{"header":"coordtorture","properties":[{"expect":"must-hold"}]}`,
		"bad properties": `{"header":"coordtorture","properties":"x"}`,
		"upper case ok":  `{"HEADER":"x","properties":[{"checker":"a","expect":"nope"}]}`,
	} {
		_, err := Read(strings.NewReader(first + "\n" + rec))
		var e *Error
		if !errors.As(err, &e) || e.Line != 1 || !strings.Contains(e.Msg, "header") {
			t.Errorf("%s: error %v, want a header error on line 1", name, err)
		}
	}
	h, err := Read(strings.NewReader(`{"Header":"other-producer"}` + "\n" + rec))
	if err != nil || h.Header == nil || h.Header.Header != "other-producer" || len(h.Records) != 1 {
		t.Fatalf("another producer's header: %v %+v", err, h)
	}
	// "header" as a value, or a null header field, is a plain record.
	h, err = Read(strings.NewReader(`{"i":1,"proc":0,"type":"invoke","f":"acquire","key":"header","header":null,"t":0}` + "\n"))
	if err != nil || h.Header != nil || len(h.Records) != 1 {
		t.Fatalf("record with header value: %v %+v", err, h)
	}
	// On the second line a header is no record: it has no type.
	_, err = Read(strings.NewReader(rec + `{"header":"coordtorture"}` + "\n"))
	var e *Error
	if !errors.As(err, &e) || e.Line != 2 {
		t.Fatalf("header on line 2: %v", err)
	}
}
