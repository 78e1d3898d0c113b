package prim

import (
	"errors"
	"testing"
	"time"
)

// The scripts' replies as parseDecision reads them (the pure Go part of a
// decision; the scripts themselves are tested on real servers in
// internal/servertest).
func TestParseDecision(t *testing.T) {
	l := &Limiter{key: "k", limit: 10}
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		reply any
		want  Decision
		err   error
	}{
		{"fixed grant", []any{int64(1), int64(7), int64(900)}, Decision{Allowed: true, Remaining: 7, Limit: 10, Reset: 900 * ms, served: true}, nil},
		{"fixed refusal: PTTL + 1ms", []any{int64(0), int64(0), int64(900)}, Decision{Remaining: 0, Limit: 10, Reset: 900 * ms, RetryAfter: 901 * ms, HasRetryAfter: true, served: true}, nil},
		{"fixed refusal, counter gone", []any{int64(0), int64(0), int64(-2)}, Decision{Limit: 10, Reset: -2 * ms, RetryAfter: ms, HasRetryAfter: true, served: true}, nil},
		{"grant", []any{int64(1), int64(3), int64(0), int64(1200)}, Decision{Allowed: true, Remaining: 3, Limit: 10, Reset: 1200 * ms, served: true}, nil},
		{"refusal", []any{int64(0), int64(2), int64(250), int64(1200)}, Decision{Remaining: 2, Limit: 10, Reset: 1200 * ms, RetryAfter: 250 * ms, HasRetryAfter: true, served: true}, nil},
		{"negative remaining clamped", []any{int64(0), int64(-4), int64(5), int64(5)}, Decision{Limit: 10, Reset: 5 * ms, RetryAfter: 5 * ms, HasRetryAfter: true, served: true}, nil},
		{"wrong type", []any{int64(-1), "wrongtype"}, Decision{}, ErrWrongType},
		{"malformed", []any{int64(-1), "malformed"}, Decision{}, ErrLimiterState},
	} {
		d, err := l.parseDecision(tc.reply)
		if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
		}
		if d != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, d, tc.want)
		}
	}
	for _, bad := range []any{nil, int64(1), "x", []any{}, []any{int64(1)}, []any{int64(1), "x", int64(0)}, []any{int64(1), int64(2), int64(3), int64(4), int64(5)}} {
		if d, err := l.parseDecision(bad); err == nil || errors.Is(err, ErrLimiterState) || errors.Is(err, ErrWrongType) || d.Allowed {
			t.Errorf("reply %#v: %+v, %v; want an unexpected-reply error", bad, d, err)
		}
	}
}

// record: decisions with a server reply set Available; a local refusal (over
// the limit) and errors do not; errors count in neither Granted nor Rejected.
func TestRecord(t *testing.T) {
	l := &Limiter{limit: 10}
	l.st.init()
	l.record(Decision{Allowed: true, Remaining: 4, served: true}, nil)
	l.record(Decision{Remaining: 0, served: false}, nil)
	l.record(Decision{}, errors.New("boom"))
	if s := l.Stats(); s.Granted != 1 || s.Rejected != 1 || s.Available != 4 {
		t.Fatalf("stats %+v", s)
	}
}
