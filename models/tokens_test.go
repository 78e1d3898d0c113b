package models

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

func TestTokenOrderPass(t *testing.T) {
	cases := map[string]*builder{
		"single": new(builder).ok(1, 0, 10, acq("k", 1, 100)),
		"sequential with gaps": new(builder).
			ok(1, 0, 10, acq("k", 3, 100)).ok(2, 20, 30, acq("k", 4, 100)).ok(1, 40, 50, acq("k", 9, 100)),
		"concurrent out of order": new(builder).
			ok(1, 0, 50, acq("k", 2, 100)).ok(2, 10, 40, acq("k", 1, 100)).ok(3, 60, 70, acq("k", 3, 100)),
		// Returned at 10, the other invoked at 10: concurrent, either order.
		"boundary is concurrent": new(builder).ok(1, 0, 10, acq("k", 5, 100)).ok(2, 10, 20, acq("k", 4, 100)),
		"keys are independent": new(builder).
			ok(1, 0, 10, acq("a", 7, 100)).ok(2, 20, 30, acq("b", 1, 100)).ok(1, 40, 50, acq("a", 8, 100)),
		"info and fail acquisitions": new(builder).
			ok(1, 0, 10, acq("k", 1, 100)).info(2, 5, 15, acq("k", 0, 100)).fail(3, 20, 25, acq("k", 0, 100)).
			ok(1, 30, 40, acq("k", 3, 100)).info(4, 45, -1, acq("k", 0, 100)),
		"waiting acquisitions": new(builder).ok(1, 0, 10, acqWait("k", 1, 100)).ok(2, 5, 30, acqWait("k", 2, 100)),
	}
	// No token seen: nothing to check, never a PASS.
	for name, b := range map[string]*builder{
		"empty":                  new(builder),
		"locks without tokens":   new(builder).ok(1, 0, 10, acq("k", 0, 100)).ok(2, 20, 30, acq("k", 0, 100)),
		"only info acquisitions": new(builder).info(1, 0, 10, acq("k", 0, 100)).info(2, 5, -1, acq("k", 0, 100)),
	} {
		t.Run(name, func(t *testing.T) { expect(t, CheckTokenOrder(b.build(t), Options{}), Unknown, "nothing to check") })
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			r := CheckTokenOrder(b.build(t), Options{})
			expect(t, r, Pass)
			if r.Visualization != nil {
				t.Error("visualization for a PASS")
			}
		})
	}
}

func TestTokenOrderFail(t *testing.T) {
	cases := map[string]struct {
		b    *builder
		want string
	}{
		"decrease in real time": {new(builder).ok(1, 0, 10, acq("k", 5, 100)).ok(2, 11, 20, acq("k", 4, 100)), "token 4 granted after token 5"},
		"equal tokens":          {new(builder).ok(1, 0, 10, acq("k", 5, 100)).ok(2, 5, 20, acq("k", 5, 100)), "token 5 granted twice"},
		"equal tokens in order": {new(builder).ok(1, 0, 10, acq("k", 5, 100)).ok(2, 30, 40, acq("k", 5, 100)), "granted twice"},
		"negative token":        {new(builder).ok(1, 0, 10, acq("k", -3, 100)), "non-positive fencing token -3"},
		"regression after an info": {new(builder).ok(1, 0, 10, acq("k", 5, 100)).info(2, 12, 14, acq("k", 0, 100)).
			ok(3, 20, 30, acq("k", 2, 100)), "token 2 granted after token 5"},
		"waiting acquisitions": {new(builder).ok(1, 0, 10, acqWait("k", 9, 100)).ok(2, 20, 30, acqWait("k", 2, 100)), "after token 9"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := CheckTokenOrder(c.b.build(t), Options{})
			expect(t, r, Fail, c.want)
			if !bytes.Contains(r.Visualization, []byte("<html")) {
				t.Errorf("no porcupine visualization (%d bytes)", len(r.Visualization))
			}
		})
	}
}

// TestTokenOrderReportsEveryViolation: the direct check finds them all, not
// only the first.
func TestTokenOrderReportsEveryViolation(t *testing.T) {
	b := new(builder).ok(1, 0, 10, acq("k", 10, 100))
	for i := int64(1); i <= 5; i++ {
		b.ok(int(i)+1, 100*i, 100*i+10, acq("k", i, 100))
	}
	r := CheckTokenOrder(b.build(t), Options{MaxEvidence: 2})
	expect(t, r, Fail)
	if r.Violations != 5 || len(r.Evidence) != 2 {
		t.Fatalf("violations %d, evidence %d", r.Violations, len(r.Evidence))
	}
	e := r.Evidence[0]
	if len(e.Ops) != 2 || e.Ops[0].Token != 10 || e.Ops[1].Token != 1 || e.Key != "k" {
		t.Errorf("evidence %+v", e)
	}
}

func TestTokenOrderDense(t *testing.T) {
	gap := new(builder).ok(1, 0, 10, acq("k", 1, 100)).ok(2, 20, 30, acq("k", 3, 100))
	// Gaps are fine by default ...
	expect(t, CheckTokenOrder(gap.build(t), Options{}), Pass)
	// ... but not for a dense counter: only porcupine sees this one.
	r := CheckTokenOrder(gap.build(t), Options{DenseTokens: true})
	expect(t, r, Fail, "porcupine", "dense counter model")
	if r.Visualization == nil {
		t.Error("no visualization")
	}
	// An info acquisition may have consumed the missing token.
	explained := new(builder).ok(1, 0, 10, acq("k", 1, 100)).info(3, 12, 15, acq("k", 0, 100)).ok(2, 20, 30, acq("k", 3, 100))
	expect(t, CheckTokenOrder(explained.build(t), Options{DenseTokens: true}), Pass)
	// Two tokens cannot come from one info acquisition.
	tooFar := new(builder).ok(1, 0, 10, acq("k", 1, 100)).info(3, 12, 15, acq("k", 0, 100)).ok(2, 20, 30, acq("k", 4, 100))
	expect(t, CheckTokenOrder(tooFar.build(t), Options{DenseTokens: true}), Fail)
	// Concurrent acquisitions linearize in token order.
	conc := new(builder).ok(1, 0, 50, acq("k", 2, 100)).ok(2, 10, 40, acq("k", 1, 100)).ok(3, 60, 70, acq("k", 3, 100))
	expect(t, CheckTokenOrder(conc.build(t), Options{DenseTokens: true}), Pass)
}

// TestTokenOrderTimeoutIsUnknown builds histories porcupine cannot decide
// quickly (dense model, forty concurrent info acquisitions: every subset of
// them is a distinct state). When they cannot explain the jump (58 tokens
// missing), the sweep, exact on a counter, decides: FAIL, saying porcupine
// timed out. When they can (40 missing) and porcupine times out (given a
// microsecond), nothing decided the key: UNKNOWN, never PASS. Porcupine
// decides that history in about 2ms, and its timeout is a select between its
// result and a timer: on a loaded machine both may be ready and the result
// win, a correct PASS that says nothing of the timeout path. So that case is
// tried up to 50 times and must time out at least once; every try that timed
// out must be UNKNOWN.
func TestTokenOrderTimeoutIsUnknown(t *testing.T) {
	for _, tc := range []struct {
		last    int64
		timeout time.Duration
		want    Verdict
	}{{60, 200 * time.Millisecond, Fail}, {42, time.Microsecond, Unknown}} {
		b := new(builder).ok(0, 0, 10, acq("k", 1, 100))
		for p := 1; p <= 40; p++ {
			b.info(p, 20+int64(p), -1, acq("k", 0, 100))
		}
		b.ok(99, 100, 110, acq("k", tc.last, 100))
		start := time.Now()
		r := CheckTokenOrder(b.build(t), Options{DenseTokens: true, Timeout: tc.timeout})
		for try := 1; tc.want == Unknown && r.Verdict == Pass && try < 50; try++ {
			r = CheckTokenOrder(b.build(t), Options{DenseTokens: true, Timeout: tc.timeout})
		}
		expect(t, r, tc.want, "timed out")
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("took %v", d)
		}
		if r.Visualization == nil {
			t.Errorf("no visualization for %s", r.Verdict)
		}
	}
}

func TestTokenOrderIgnoresOtherOps(t *testing.T) {
	h := new(builder).ok(1, 0, 10, history.Op{F: history.FWrite, Key: "k", Token: 5}).
		ok(2, 20, 30, acq("k", 1, 100)).build(t)
	expect(t, CheckTokenOrder(h, Options{}), Pass)
}

// TestNoGoroutineLeak: porcupine's workers have all stopped when the check
// returns, even after a timeout.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	b := new(builder).ok(0, 0, 10, acq("k", 1, 100))
	for p := 1; p <= 30; p++ {
		b.info(p, 20+int64(p), -1, acq("k", 0, 100))
	}
	b.ok(99, 100, 110, acq("k", 60, 100))
	h := b.build(t)
	for k := 0; k < 3; k++ {
		CheckTokenOrder(h, Options{DenseTokens: true, Timeout: 20 * time.Millisecond})
		CheckTokenOrder(tokenHistory(500, uint64(k)), Options{})
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines before, %d after", before, n)
	}
}
