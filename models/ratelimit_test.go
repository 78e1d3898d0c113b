package models

import (
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

func fixed(key string, limit, windowMs int64) history.Op {
	return history.Op{F: history.FAllow, Key: key, Algo: history.AlgoFixed, Limit: limit, WindowMs: windowMs}
}
func sliding(key string, limit, windowMs, segments int64) history.Op {
	return history.Op{F: history.FAllow, Key: key, Algo: history.AlgoSliding, Limit: limit, WindowMs: windowMs, Segments: segments}
}
func bucket(key string, burst, rate, periodMs int64) history.Op {
	return history.Op{F: history.FAllow, Key: key, Algo: history.AlgoBucket, Burst: burst, Rate: rate, PeriodMs: periodMs}
}

// grants adds n grants of op, each invoked at start+k·step and lasting dur.
func grants(b *builder, op history.Op, n int, start, step, dur int64) *builder {
	for k := 0; k < n; k++ {
		b.ok(k, start+int64(k)*step, start+int64(k)*step+dur, op)
	}
	return b
}

func TestFixedWindow(t *testing.T) {
	f := fixed("r", 2, 100) // at most 4 in any span < 100 ms
	expect(t, rate(t, grants(new(builder), f, 1, 0, 0, 1), Options{}), Pass)
	expect(t, rate(t, grants(new(builder), f, 4, 0, m(1), m(1)), Options{}), Pass)
	expect(t, rate(t, grants(new(builder), f, 5, 0, m(1), m(1)), Options{}), Fail, "5 permits", "bound 4")
	// Five grants spread over exactly 100 ms (first invoked at 0, last
	// returned at 100): the span is not shorter than the window.
	expect(t, rate(t, grants(new(builder), f, 5, 0, m(24), m(4)), Options{}), Pass)
	// One nanosecond less: violation.
	expect(t, rate(t, grants(new(builder), f, 5, 0, m(24), m(4)-1), Options{}), Fail)
	// Denied and unknown requests do not count.
	b := grants(new(builder), f, 4, 0, m(1), m(1))
	b.fail(10, m(2), m(3), f).info(11, m(2), m(3), f)
	expect(t, rate(t, b, Options{}), Pass)
	// Permits are weighted.
	heavy := f
	heavy.N = 3
	expect(t, rate(t, grants(new(builder), heavy, 2, 0, m(1), m(1)), Options{}), Fail, "6 permits")
	// Drift shortens the span.
	expect(t, rate(t, grants(new(builder), f, 5, 0, m(23), m(4)), Options{Drift: 5 * time.Millisecond}), Pass)
}

func TestSlidingWindow(t *testing.T) {
	s := sliding("r", 3, 100, 4) // at most 3 in any span shorter than 100 ms
	expect(t, rate(t, grants(new(builder), s, 3, 0, m(1), m(1)), Options{}), Pass)
	expect(t, rate(t, grants(new(builder), s, 4, 0, m(1), m(1)), Options{}), Fail, "4 permits", "bound 3")
	// Four grants within 100 ms − 1 ns: a violation.
	expect(t, rate(t, grants(new(builder), s, 4, 0, m(33), m(1)-1), Options{}), Fail)
	// Within exactly 100 ms: legal (the first permit expired at 100 ms).
	expect(t, rate(t, grants(new(builder), s, 4, 0, m(33), m(1)), Options{}), Pass)
	// Four grants within 80 ms: between window − segment (75 ms) and the
	// window. Only the forward-rounding bound catches it: what a limiter
	// that rounds timestamps backward (to the segment's start) does, whose
	// permits expire up to a segment early.
	expect(t, rate(t, grants(new(builder), s, 4, 0, m(26), m(2)), Options{}), Fail, "4 permits")
	// Drift shortens the span: the same grants pass with 25 ms of drift.
	expect(t, rate(t, grants(new(builder), s, 4, 0, m(26), m(2)), Options{Drift: 25 * time.Millisecond}), Pass)
	// A sliding window that rounds backward, granting as its permits expire
	// (3 at 0-1 ms stamped 0, expiring at 100 ms, then 3 more at 100-101
	// ms) is legal; a fourth stamped back at 75 ms and granted again at
	// 170 ms breaks the bound.
	b := grants(new(builder), s, 3, 0, 1, m(1))
	grants(b, s, 3, m(100), 1, m(1))
	expect(t, rate(t, b, Options{}), Pass)
	b.ok(7, m(176), m(177), s)
	expect(t, rate(t, b, Options{}), Fail, "4 permits")
}

func TestTokenBucket(t *testing.T) {
	tb := bucket("r", 5, 1, 10) // burst 5, one more per 10 ms
	expect(t, rate(t, grants(new(builder), tb, 5, 0, 1, 1), Options{}), Pass)
	expect(t, rate(t, grants(new(builder), tb, 6, 0, 1, 1), Options{}), Fail, "6 permits", "burst 5")
	// Burst, then one every 10 ms: exactly at the bound.
	b := grants(new(builder), tb, 5, 0, 1, 1)
	b.ok(20, m(10), m(10), tb).ok(21, m(20), m(20), tb).ok(22, m(30), m(30), tb)
	expect(t, rate(t, b, Options{}), Pass)
	// ... one more at 30 ms is one too many.
	b.ok(23, m(30), m(30), tb)
	expect(t, rate(t, b, Options{}), Fail)
	// A limiter that trusts the client clock: a client 50 ms ahead gets a
	// second burst right away.
	skewed := grants(new(builder), tb, 5, 0, 1, 1)
	grants(skewed, tb, 5, m(1), 1, 1)
	expect(t, rate(t, skewed, Options{}), Fail)
	// Long, overlapping requests are not counted against a short span.
	slow := grants(new(builder), tb, 10, 0, 1, m(100))
	expect(t, rate(t, slow, Options{}), Pass)
}

// Nothing granted: nothing to check, never PASS.
func TestRateLimitNothingGranted(t *testing.T) {
	expect(t, rate(t, new(builder), Options{}), Unknown, "nothing to check")
	b := new(builder).fail(1, 0, 1, fixed("r", 2, 100)).info(2, 0, 1, fixed("r", 2, 100))
	expect(t, rate(t, b, Options{}), Unknown, "nothing to check")
}

// A limiter over its bound twice: the first violation's time is when it was
// first complete (a fault after it cannot explain it), and the evidence
// holds the grant that completed it.
func TestRateLimitFirstViolation(t *testing.T) {
	f := fixed("r", 1, 100)                        // at most 2 in any span < 100 ms
	b := grants(new(builder), f, 3, 0, m(1), m(1)) // over at 3 ms
	grants(b, f, 30, m(500), m(1), m(1))           // far worse at 500-530 ms
	r := rate(t, b, Options{})
	expect(t, r, Fail, "first over the bound")
	if got := r.Earliest[KindOverLimit]; got != m(3) {
		t.Fatalf("earliest %s, want 3ms", fmtT(got))
	}
	for _, e := range r.Evidence {
		if len(e.Ops) > 20 {
			t.Fatalf("%d operations in the evidence", len(e.Ops))
		}
	}
	last := r.Evidence[len(r.Evidence)-1]
	if got := last.Ops[len(last.Ops)-1].Return; got != m(530) {
		t.Fatalf("the worst span's evidence ends at %s, want its last grant (530ms)", fmtT(got))
	}
}

func TestRateLimitConfiguration(t *testing.T) {
	missing := history.Op{F: history.FAllow, Key: "r"}
	expect(t, rate(t, grants(new(builder), missing, 2, 0, 1, 1), Options{}), Unknown, "no algo")
	expect(t, rate(t, grants(new(builder), history.Op{F: history.FAllow, Key: "r", Algo: "magic"}, 2, 0, 1, 1), Options{}), Unknown, "unknown limiter")
	expect(t, rate(t, grants(new(builder), history.Op{F: history.FAllow, Key: "r", Algo: history.AlgoFixed}, 2, 0, 1, 1), Options{}), Unknown, "missing")
	b := new(builder).ok(1, 0, 1, fixed("r", 2, 100)).ok(2, 2, 3, fixed("r", 3, 100))
	expect(t, rate(t, b, Options{}), Unknown, "disagree")
	// The configuration may be on the first operation only.
	c := new(builder).ok(1, 0, 1, fixed("r", 2, 100))
	c.ok(2, 2, 3, history.Op{F: history.FAllowWait, Key: "r"}).ok(3, 4, 5, history.Op{F: history.FAllow, Key: "r"})
	expect(t, rate(t, c, Options{}), Pass)
	c.ok(4, 6, 7, history.Op{F: history.FAllow, Key: "r"})
	expect(t, rate(t, c, Options{}), Pass)
	c.ok(5, 8, 9, history.Op{F: history.FAllow, Key: "r"})
	expect(t, rate(t, c, Options{}), Fail, "bound 4")
}

func TestMaxTree(t *testing.T) {
	leaves := []float64{1, 5, 2, 8, 3}
	tr := newMaxTree(leaves)
	naive := append([]float64(nil), leaves...)
	ops := [][3]int{{1, 4, 3}, {0, 5, -2}, {2, 3, 10}, {4, 5, 1}, {0, 1, 7}}
	for _, op := range ops {
		tr.add(op[0], op[1], float64(op[2]))
		for i := op[0]; i < op[1]; i++ {
			naive[i] += float64(op[2])
		}
		for l := 0; l < len(naive); l++ {
			for r := l + 1; r <= len(naive); r++ {
				want := naive[l]
				for _, v := range naive[l:r] {
					want = max(want, v)
				}
				if got := tr.max(l, r); got != want {
					t.Fatalf("max(%d,%d) = %v, want %v (%v)", l, r, got, want, naive)
				}
			}
		}
	}
}

func rate(t *testing.T, b *builder, o Options) Result {
	t.Helper()
	return CheckRateLimit(b.build(t), o)
}

// Availability (KindWronglyLimited): a denial the algorithm's own state had
// to grant, counting every grant and uncertain request that may have come
// before it; boundary-equal times are legal.
func TestRateLimitAvailability(t *testing.T) {
	tb := bucket("r", 2, 1, 100) // burst 2, one more per 100 ms
	drained := func() *builder { return grants(new(builder), tb, 2, 0, 0, 0) }
	// At 100 ms one token is back: a denial then is legal only up to the
	// refill's instant.
	expect(t, rate(t, drained().fail(5, m(100)-1, m(100)-1, tb), Options{}), Pass)
	expect(t, rate(t, drained().fail(5, m(101), m(101), tb), Options{}), Fail, "held at least 1.01 tokens")
	// Drift delays the refill.
	expect(t, rate(t, drained().fail(5, m(104), m(104), tb), Options{Drift: 5 * time.Millisecond}), Pass)
	// Two tokens asked at 150 ms: one and a half there.
	two := tb
	two.N = 2
	expect(t, rate(t, drained().fail(5, m(150), m(150), two), Options{}), Pass)
	// An uncertain request may have taken the token back.
	expect(t, rate(t, drained().info(6, m(60), m(61), tb).fail(5, m(150), m(150), tb), Options{}), Pass)
	// A grant concurrent with the denial may have come first.
	expect(t, rate(t, drained().ok(6, m(140), m(160), tb).fail(5, m(150), m(150), tb), Options{}), Pass)
	// A request that failed with an error was not decided.
	errd := tb
	errd.Err = "connection refused"
	expect(t, rate(t, drained().fail(5, m(500), m(500), errd), Options{}), Pass)

	f := fixed("r", 2, 100) // look-back: two windows
	full := func() *builder { return grants(new(builder), f, 2, 0, 0, m(1)) }
	expect(t, rate(t, full().fail(5, m(201), m(201), f), Options{}), Pass) // the grant may have been at 1 ms
	expect(t, rate(t, full().fail(5, m(201)+1, m(202), f), Options{}), Fail, "the counter was empty")
	// A denial whose look-back begins before the history: its state is unknown.
	expect(t, rate(t, new(builder).ok(1, m(300), m(300), f).fail(5, m(150), m(150), f), Options{}), Pass)
	// More than the limit can never be granted.
	three := f
	three.N = 3
	expect(t, rate(t, full().fail(5, m(900), m(900), three), Options{}), Pass)

	s := sliding("r", 2, 100, 4) // look-back: a window, a segment and a millisecond
	held := func() *builder { return grants(new(builder), s, 2, 0, 0, 0) }
	expect(t, rate(t, held().fail(5, m(126), m(126), s), Options{}), Pass)
	expect(t, rate(t, held().fail(5, m(126)+1, m(126)+1, s), Options{}), Fail, "the window was empty")
}

// A denial's RetryAfter (count, µs) may not be later than the state it read
// allows the same request; exactly that late is legal.
func TestRateLimitRetryAfter(t *testing.T) {
	f := fixed("r", 2, 100)
	retry := func(op history.Op, d time.Duration) history.Op { op.Count = d.Microseconds(); return op }
	full := func() *builder { return grants(new(builder), f, 2, 0, 0, m(1)) }
	// The counter was made by 1 ms at the latest: gone by 101 ms (+1 ms).
	expect(t, rate(t, full().fail(5, m(50), m(51), retry(f, 52*time.Millisecond)), Options{}), Pass)
	expect(t, rate(t, full().fail(5, m(50), m(51), retry(f, 53*time.Millisecond)), Options{}), Fail, "RetryAfter 53ms", "too late")
	s := sliding("r", 2, 100, 4)
	expect(t, rate(t, grants(new(builder), s, 2, 0, 0, 0).fail(5, m(50), m(51), retry(s, 76*time.Millisecond)), Options{}), Pass)
	expect(t, rate(t, grants(new(builder), s, 2, 0, 0, 0).fail(5, m(50), m(51), retry(s, 77*time.Millisecond)), Options{}), Fail, "too late")
	tb := bucket("r", 2, 1, 100)
	drained := func() *builder { return grants(new(builder), tb, 2, 0, 0, 0) }
	// Half a token at 50 ms: the other half by 100 ms.
	expect(t, rate(t, drained().fail(5, m(50), m(50), retry(tb, 51*time.Millisecond)), Options{}), Pass)
	expect(t, rate(t, drained().fail(5, m(50), m(50), retry(tb, 52*time.Millisecond)), Options{}), Fail, "RetryAfter 52ms", "too late")
	// Another grant concurrent with the denial may have taken the half.
	expect(t, rate(t, drained().ok(6, m(40), m(160), tb).fail(5, m(50), m(50), retry(tb, 151*time.Millisecond)), Options{}), Pass)
}
