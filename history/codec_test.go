package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

var sampleLines = []string{
	`{"i":17,"proc":3,"type":"invoke","f":"acquire","key":"k","t":1234567}`,
	`{"i":18,"proc":3,"type":"ok","f":"acquire","key":"k","token":12,"owner":"9f..","ttl_ms":500,"t":1301112}`,
	`{"i":19,"proc":4,"type":"invoke","f":"release","key":"k","t":1350000}`,
	`{"i":20,"proc":4,"type":"info","f":"release","key":"k","err":"i/o timeout","t":1400000}`,
	`{"i":21,"proc":3,"type":"invoke","f":"write","key":"resource","token":12,"value":"v7","t":1450000}`,
	`{"i":22,"proc":3,"type":"ok","f":"write","key":"resource","token":12,"value":"v7","t":1500000}`,
}

func TestDecodeDesignExample(t *testing.T) {
	h, err := Read(strings.NewReader(strings.Join(sampleLines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Records) != 6 || len(h.Ops) != 3 {
		t.Fatalf("got %d records, %d ops", len(h.Records), len(h.Ops))
	}
	acq := h.Ops[0]
	if acq.F != "acquire" || acq.Type != OK || acq.Token != 12 || acq.Owner != "9f.." || acq.TTLMs != 500 ||
		acq.Call() != 1234567 || acq.Return != 1301112 || acq.I != 17 || acq.ReturnI != 18 || !acq.Done {
		t.Errorf("acquire: %+v", acq)
	}
	if rel := h.Ops[1]; rel.Type != Info || rel.Err != "i/o timeout" {
		t.Errorf("release: %+v", rel)
	}
	if w := h.Ops[2]; w.Type != OK || w.Token != 12 || w.Value != "v7" || w.Key != "resource" {
		t.Errorf("write: %+v", w)
	}
	if h.End != 1500000 {
		t.Errorf("End = %d", h.End)
	}
}

func TestUnfinishedOperationIsInfo(t *testing.T) {
	h, err := Read(strings.NewReader(sampleLines[0] + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := h.Ops[0]
	if o.Type != Info || o.Done || o.Return != Never || o.ReturnI != -1 {
		t.Errorf("unfinished: %+v", o)
	}
}

func TestDecodeErrors(t *testing.T) {
	inv := func(i, proc, tm int) string {
		return `{"i":` + itoa(i) + `,"proc":` + itoa(proc) + `,"type":"invoke","f":"acquire","key":"k","t":` + itoa(tm) + `}`
	}
	cases := []struct {
		name     string
		in       string
		line     int
		col      int
		contains string
	}{
		{"bad json", `{"i":1,"proc":1,"type":"invoke","f":"a","t":1`, 1, 46, "unexpected end"},
		{"not an object", `[1,2]`, 1, 1, "expected '{'"},
		{"unknown type", `{"i":1,"proc":1,"type":"maybe","f":"a","t":1}`, 1, 24, "unknown record type"},
		{"missing type", `{"i":1,"proc":1,"f":"a","t":1}`, 1, 1, "missing record type"},
		{"completion without invoke", `{"i":1,"proc":1,"type":"ok","f":"a","t":1}`, 1, 24, "no operation in flight"},
		{"two in flight", inv(1, 1, 1) + "\n" + inv(2, 1, 2), 2, 15, "still in flight"},
		{"time backwards", inv(1, 1, 5) + "\n" + inv(2, 2, 4), 2, 61, "time goes backwards"},
		{"i not increasing", inv(5, 1, 5) + "\n" + inv(5, 2, 6), 2, 6, "not greater"},
		{"negative time", `{"i":1,"proc":1,"type":"invoke","f":"a","t":-1}`, 1, 45, "negative time"},
		{"string for int", `{"i":1,"proc":"one","type":"invoke","f":"a","t":1}`, 1, 15, `"proc" must be an integer`},
		{"float", `{"i":1,"proc":1,"type":"invoke","f":"a","t":1.5}`, 1, 45, "not an integer"},
		{"overflow", `{"i":1,"proc":1,"type":"invoke","f":"a","t":9223372036854775808}`, 1, 45, "64 bits"},
		{"trailing garbage", `{"i":1,"proc":1,"type":"invoke","f":"a","t":1} x`, 1, 48, "after the end of the record"},
		{"two records on a line", `{"i":1,"proc":1,"type":"invoke","f":"a","t":1}{}`, 1, 47, "one record per line"},
		{"invoke without f", `{"i":1,"proc":1,"type":"invoke","t":1}`, 1, 1, "without an operation name"},
		{"f mismatch", inv(1, 1, 1) + "\n" + `{"i":2,"proc":1,"type":"ok","f":"release","t":2}`, 2, 33, "does not match"},
		{"key mismatch", inv(1, 1, 1) + "\n" + `{"i":2,"proc":1,"type":"ok","key":"other","t":2}`, 2, 35, "does not match"},
		{"control char", "{\"i\":1,\"proc\":1,\"type\":\"invoke\",\"f\":\"a\x01\",\"t\":1}", 1, 39, "control characters"},
		{"bad escape", `{"i":1,"proc":1,"type":"invoke","f":"a\q","t":1}`, 1, 40, "escape"},
		{"error on later line", sampleLines[0] + "\n\n" + `{"i":18,"proc":3,"type":"ok","t":1}`, 3, 34, "time goes backwards"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadAll(strings.NewReader(c.in))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want *Error, got %v", err)
			}
			if e.Line != c.line || e.Column != c.col || !strings.Contains(e.Msg, c.contains) {
				t.Errorf("got %v (line %d col %d), want line %d col %d containing %q", e, e.Line, e.Column, c.line, c.col, c.contains)
			}
			if !strings.HasPrefix(e.Error(), "line ") {
				t.Errorf("message %q does not start with the line", e.Error())
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestDecoderErrorIsSticky(t *testing.T) {
	d := NewDecoder(strings.NewReader("{\n" + sampleLines[0] + "\n"))
	var op Op
	err1 := d.Decode(&op)
	err2 := d.Decode(&op)
	if err1 == nil || err1 != err2 {
		t.Fatalf("errors %v, %v", err1, err2)
	}
}

func TestDecoderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader(sampleLines[0]+"\n"+`{"i":18`), iotest.ErrReader(boom))
	ops, err := ReadAll(r)
	if !errors.Is(err, boom) || len(ops) != 1 {
		t.Fatalf("ops %d, err %v", len(ops), err)
	}
}

func TestDecoderLongLinesAndNoFinalNewline(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	in := `{"i":1,"proc":1,"type":"invoke","f":"write","value":"` + long + `","t":1}` + "\r\n" +
		`{"i":2,"proc":1,"type":"ok","t":2}`
	ops, err := ReadAll(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[0].Value != long || ops[1].T != 2 {
		t.Fatalf("got %d ops", len(ops))
	}
	tooLong := `{"value":"` + strings.Repeat("x", MaxLineBytes+10) + `"}`
	_, err = ReadAll(strings.NewReader(tooLong))
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "longer than") || e.Line != 1 {
		t.Fatalf("too long: %v", err)
	}
}

func TestDecoderOneByteReader(t *testing.T) {
	in := strings.Join(sampleLines, "\n")
	a, err := ReadAll(iotest.OneByteReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadAll(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one-byte reads decode differently")
	}
}

func TestEmptyInput(t *testing.T) {
	for _, in := range []string{"", "\n", "  \n\t\r\n"} {
		h, err := Read(strings.NewReader(in))
		if err != nil || len(h.Ops) != 0 || h.End != 0 {
			t.Errorf("%q: %v %+v", in, err, h)
		}
	}
}

// randomString mixes ASCII, escapes, multi-byte runes, surrogate-range
// escapes and invalid UTF-8.
func randomString(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return ""
	}
	pieces := []string{"a", "k", "Z", "0", " ", `"`, `\`, "/", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "€", "😀",
		"\u2028", "\xff", "\xc3", "<", "&", "\ufffd", "\u212a", "{inv:42}:lease"}
	var sb strings.Builder
	for n := r.IntN(8); n >= 0; n-- {
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	return sb.String()
}

func randomInt(r *rand.Rand) int64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.MaxInt64
	case 2:
		return math.MinInt64
	case 3:
		return -r.Int64N(1000)
	default:
		return r.Int64N(1 << 40)
	}
}

func randomOp(r *rand.Rand) Op {
	return Op{
		I: randomInt(r), Process: int(randomInt(r)), Type: Type(r.IntN(4) + 1), F: randomString(r),
		Key: randomString(r), Field: randomString(r), Token: randomInt(r), Owner: randomString(r),
		TTLMs: randomInt(r), Value: randomString(r), Err: randomString(r), N: randomInt(r),
		Count: randomInt(r), Gen: randomInt(r), Seq: randomInt(r), Capacity: randomInt(r),
		Algo: randomString(r), Limit: randomInt(r), WindowMs: randomInt(r), Segments: randomInt(r),
		Burst: randomInt(r), Rate: randomInt(r), PeriodMs: randomInt(r), Explains: randomString(r), DriftUs: randomInt(r), T: randomInt(r),
	}
}

func normalized(op Op) Op {
	for _, p := range []*string{&op.F, &op.Key, &op.Field, &op.Owner, &op.Value, &op.Err, &op.Algo, &op.Explains} {
		*p = fixInvalid(*p)
	}
	return op
}

// fixInvalid replaces each invalid byte with U+FFFD (ToValidUTF8 merges runs).
func fixInvalid(s string) string {
	var sb strings.Builder
	for _, r := range s {
		sb.WriteRune(r)
	}
	return sb.String()
}

func TestEncodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 5000; k++ {
		op := randomOp(r)
		line := AppendRecord(nil, &op)
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("not one line: %q", line)
		}
		var mine, std Op
		if err := ParseRecord(line, &mine); err != nil {
			t.Fatalf("ParseRecord(%q): %v", line, err)
		}
		if err := json.Unmarshal(line, &std); err != nil {
			t.Fatalf("json.Unmarshal(%q): %v", line, err)
		}
		want := normalized(op)
		if !reflect.DeepEqual(mine, want) {
			t.Fatalf("ParseRecord(%q)\n got %+v\nwant %+v", line, mine, want)
		}
		if !reflect.DeepEqual(std, want) {
			t.Fatalf("json.Unmarshal(%q)\n got %+v\nwant %+v", line, std, want)
		}
		// encoding/json's own output decodes the same with the scanner.
		js, err := json.Marshal(&op)
		if err != nil {
			t.Fatal(err)
		}
		var fromStd Op
		if err := ParseRecord(js, &fromStd); err != nil || !reflect.DeepEqual(fromStd, want) {
			t.Fatalf("ParseRecord(json.Marshal) = %+v, %v\nwant %+v", fromStd, err, want)
		}
	}
}

// agreementLines are valid and invalid records in forms encoding/json
// accepts but the Encoder never writes.
var agreementLines = []string{
	`{}`, ` { } `, "\t{\"i\" : 1 ,\r\"t\":2}\r", `{"type":null}`, `{"type":"ok","type":null}`, `{"type":1}`,
	`{"type":"zz"}`, `{"TYPE":"ok"}`, `{"Type":"Ok"}`, `{"toKen":5}`, `{"to\u212aen":5}`, `{"ttl_m\u017f":5}`,
	"{\"to\xe2\x84\xaaen\":6}", `{"key":"a\ud800b"}`, `{"key":"\ud83d\ude00"}`, `{"key":"\ud800\ud800x"}`,
	"{\"key\":\"a\xffb\"}", `{"token":-0}`, `{"token":1e3}`, `{"token":1.0}`, `{"token":9223372036854775808}`,
	`{"token":-9223372036854775808}`, `{"token":-9223372036854775809}`, `{"token":01}`, `{"token":-}`,
	`{"token":+1}`, `{"key":5}`, `{"token":"5"}`, `{"x":[1,{"a":2}],"i":3}`, `{"i":1,"token":2,"token":null}`,
	`{"key":"\u0000"}`, `{"type":"ok","i":1}x`, `{"type":"zz","i":"a"}`, `{"i":"a","type":"zz"}`,
	`{"i":true}`, `{"key":"\ud800\u0041"}`, `{"type":"o\u006b"}`, `{"x":{"y":[true,false,null,"s",-1.5e+3]}}`,
	`{"x":tru}`, `{"x":[1,]}`, `{"x":{"a"}}`, `{"x":"\u12"}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"i":1 "t":2}`,
	`{"key":"\/\b\f\n\r\t\"\\"}`, `{"value":null,"owner":null,"proc":null}`, `{"proc":-5}`, `{"unknown_field":"x"}`,
	`{"n":1E2}`, `{"n":0.}`, `{"n":.5}`, `{"n":1e}`, `{"seq":[1]}`, `{"seq":{}}`, `{"f":["a"]}`, `{"f":true}`,
	`{"i":1}}`, `{"i":1`, `{"i`, `{"`, `{`, ``, ` `, `"str"`, `5`, `[]`, `{"x":"\uD834\uDD1E"}`,
	`{"key":"\uDD1E\uD834"}`, `{"t":12345678901234567890123}`, `{"segments":3,"SEGMENTS":4}`,
}

func TestParseRecordAgreesWithEncodingJSON(t *testing.T) {
	for _, line := range agreementLines {
		checkAgreement(t, []byte(line))
	}
}

// checkAgreement fails unless ParseRecord and json.Unmarshal agree on line:
// both reject it, or both accept it with the same Op. A top-level null is the
// one input encoding/json accepts (as a no-op) and the format does not.
func checkAgreement(t *testing.T, line []byte) {
	t.Helper()
	var mine, std Op
	errMine := ParseRecord(line, &mine)
	errStd := json.Unmarshal(line, &std)
	if errStd == nil && bytes.Equal(bytes.TrimSpace(line), []byte("null")) {
		if errMine == nil {
			t.Errorf("ParseRecord accepts a top-level null")
		}
		return
	}
	if (errMine == nil) != (errStd == nil) {
		t.Fatalf("%q: ParseRecord error %v, encoding/json error %v", line, errMine, errStd)
	}
	if errMine == nil && !reflect.DeepEqual(mine, std) {
		t.Fatalf("%q:\n ParseRecord %+v\nencoding/json %+v", line, mine, std)
	}
	if errMine != nil {
		var e *Error
		if !errors.As(errMine, &e) || e.Line != 1 || e.Column < 1 || e.Column > len(line)+1 {
			t.Fatalf("%q: bad error position %v", line, errMine)
		}
	}
}

func TestTypeText(t *testing.T) {
	for ty := Invoke; ty <= Info; ty++ {
		b, err := ty.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Type
		if err := back.UnmarshalText(b); err != nil || back != ty || ty.String() != string(b) {
			t.Errorf("%v: %q %v %v", ty, b, back, err)
		}
	}
	if _, err := Type(0).MarshalText(); err == nil {
		t.Error("zero Type marshals")
	}
	if err := new(Type).UnmarshalText([]byte("OK")); err == nil {
		t.Error("OK (upper case) accepted")
	}
	if Type(9).String() != "Type(9)" || Type(0).Valid() || Invoke.Completion() || !Info.Completion() {
		t.Error("Type predicates")
	}
}

func TestNewValidates(t *testing.T) {
	recs := []Op{
		{I: 0, Process: 1, Type: Invoke, F: "acquire", Key: "k", T: 10},
		{I: 1, Process: 1, Type: OK, Token: 3, T: 20},
	}
	h, err := New(recs)
	if err != nil {
		t.Fatal(err)
	}
	if h.Ops[0].Token != 3 || h.Ops[0].Key != "k" || h.Ops[0].F != "acquire" {
		t.Errorf("merged: %+v", h.Ops[0])
	}
	bad := append([]Op(nil), recs...)
	bad[1].T = 5
	_, err = New(bad)
	var e *Error
	if !errors.As(err, &e) || e.Line != 2 || e.Column != 0 || !strings.HasPrefix(err.Error(), "record 2: ") {
		t.Errorf("got %v", err)
	}
}

func TestOperationString(t *testing.T) {
	o := Operation{Op: Op{I: 3, Process: 2, F: "acquire", Key: "k", Type: OK, Token: 7, TTLMs: 100, T: 5}, Return: 9, Done: true}
	s := o.String()
	for _, want := range []string{"#3", "proc 2", "acquire", `key="k"`, "ok", "token=7", "[5, 9]"} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
	if o.Weight() != 1 {
		t.Error("weight")
	}
}
