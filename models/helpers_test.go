package models

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// builder makes hand-written histories: each op gives its process, invoke
// and completion times and outcome; records are ordered by time (a
// completion before an invocation at the same instant) and numbered.
type builder struct {
	recs   []rec
	header *history.Header // the history's header, if any
}

type rec struct {
	op   history.Op
	seq  int
	call int64
}

// add appends an operation; ret < 0 means it never completed. Every field of
// in goes on the invoke record (the checkers read merged operations).
func (b *builder) add(proc int, call, ret int64, typ history.Type, in history.Op) *builder {
	in.Process, in.Type, in.T = proc, history.Invoke, call
	b.recs = append(b.recs, rec{in, len(b.recs), call})
	if ret >= 0 {
		b.recs = append(b.recs, rec{history.Op{Process: proc, Type: typ, T: ret}, len(b.recs), call})
	}
	return b
}

func (b *builder) ok(proc int, call, ret int64, in history.Op) *builder {
	return b.add(proc, call, ret, history.OK, in)
}

func (b *builder) fail(proc int, call, ret int64, in history.Op) *builder {
	return b.add(proc, call, ret, history.Fail, in)
}

func (b *builder) info(proc int, call, ret int64, in history.Op) *builder {
	return b.add(proc, call, ret, history.Info, in)
}

func (b *builder) build(t testing.TB) *history.History {
	t.Helper()
	rs := slices.Clone(b.recs)
	// At equal times completions come first, except the completion of an
	// operation invoked at that same instant, which follows the invokes.
	rank := func(r rec) int {
		if r.op.Type == history.Invoke {
			return 1
		}
		if r.call == r.op.T {
			return 2
		}
		return 0
	}
	slices.SortStableFunc(rs, func(x, y rec) int {
		return cmp.Or(cmp.Compare(x.op.T, y.op.T), cmp.Compare(rank(x), rank(y)), cmp.Compare(x.seq, y.seq))
	})
	ops := make([]history.Op, len(rs))
	for k := range rs {
		ops[k] = rs[k].op
		ops[k].I = int64(k)
	}
	h, err := history.New(ops)
	if err != nil {
		t.Fatalf("bad test history: %v", err)
	}
	h.Header = b.header
	return h
}

func expect(t *testing.T, r Result, want Verdict, contains ...string) {
	t.Helper()
	if r.Verdict != want {
		t.Fatalf("%s: got %v, want %v\n%s", r.Checker, r.Verdict, want, describe(r))
	}
	text := describe(r)
	for _, s := range contains {
		if !strings.Contains(text, s) {
			t.Errorf("%s: result lacks %q:\n%s", r.Checker, s, text)
		}
	}
	if want == Fail && (r.Violations == 0 || len(r.Evidence) == 0) {
		t.Errorf("%s: FAIL without evidence", r.Checker)
	}
	if want == Fail {
		for _, e := range r.Evidence {
			if len(e.Ops) == 0 && r.Visualization == nil {
				t.Errorf("%s: evidence %q lists no operation", r.Checker, e.Msg)
			}
		}
	}
}

func describe(r Result) string {
	var b strings.Builder
	b.WriteString(r.String())
	for _, e := range r.Evidence {
		b.WriteString("\n  ")
		b.WriteString(e.String())
	}
	return b.String()
}

// Shorthands for records.
func acq(key string, token int64, ttlMs int64) history.Op {
	return history.Op{F: history.FAcquire, Key: key, Token: token, TTLMs: ttlMs}
}

func acqWait(key string, token int64, ttlMs int64) history.Op {
	return history.Op{F: history.FAcquireWait, Key: key, Token: token, TTLMs: ttlMs}
}

func owned(op history.Op, owner string) history.Op { op.Owner = owner; return op }

func rel(key string) history.Op { return history.Op{F: history.FRelease, Key: key} }

func write(key string, token int64) history.Op {
	return history.Op{F: history.FWrite, Key: key, Token: token}
}

const msNs = 1_000_000
