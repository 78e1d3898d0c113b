package models

import (
	"fmt"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// Histories that violate at nearly every operation (issue 30's review): the
// checkers must stay O(n log n) on them, computing each violation's
// Reach.Since (the latest proof of presence of the lease a loss must have
// erased) without scanning every open window or every earlier operation.

// overlapHistory: n exclusive (f) grants of one lock without ttl, never
// released, every third one verified true later on (a proof of presence):
// every grant after the first overlaps every earlier one.
func overlapHistory(n int, f string) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	for i := 0; len(b.ops) < n; i++ {
		now := int64(i) * 1000
		b.add(i%64, now, now+100, history.OK, history.Op{F: f, Key: keyName(0), Owner: fmt.Sprint(i)})
		if i%3 == 2 && len(b.ops) < n {
			b.add(i%64, now+500, now+600, history.OK, history.Op{F: history.FVerify, Key: keyName(0), Owner: fmt.Sprint(i - 1), Value: history.ValueTrue})
		}
	}
	return b.history()
}

// rwOverlapHistory: alternating writers and readers without ttl, never
// released, as overlapHistory.
func rwOverlapHistory(n int) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	for i := 0; len(b.ops) < n; i++ {
		now := int64(i) * 1000
		f := history.FAcquireRead
		if i%2 == 0 {
			f = history.FAcquireWrite
		}
		b.add(i%64, now, now+100, history.OK, history.Op{F: f, Key: keyName(0), Owner: fmt.Sprint(i)})
		if i%3 == 2 && len(b.ops) < n {
			b.add(i%64, now+500, now+600, history.OK, history.Op{F: history.FVerify, Key: keyName(0), Owner: fmt.Sprint(i - 2), Value: history.ValueTrue})
		}
	}
	return b.history()
}

// overCapacityHistory: n/4 permits of capacity n/4 held for good (renewed
// now and then), then a fifth permit taken and released over and over: an
// over-capacity episode at each of its grants, each beside n/4 open permits.
func overCapacityHistory(n int) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	c := int64(n / 4)
	i := 0
	for ; int64(i) < c; i++ {
		now := int64(i) * 1000
		b.add(i%64, now, now+100, history.OK, history.Op{F: history.FSemAcquire, Key: keyName(0), Capacity: c, Owner: fmt.Sprint(i)})
	}
	for j := 0; len(b.ops) < n; j++ {
		now := int64(i+j) * 1000
		b.add(64, now, now+100, history.OK, history.Op{F: history.FSemAcquire, Key: keyName(0), Capacity: c, Owner: fmt.Sprint("x", j)})
		b.add(64, now+500, now+600, history.OK, history.Op{F: history.FRelease, Key: keyName(0), Owner: fmt.Sprint("x", j)})
		if len(b.ops) < n {
			b.add(j%64, now+700, now+800, history.OK, history.Op{F: history.FRenew, Key: keyName(0), Owner: fmt.Sprint(j % int(c))})
		}
	}
	return b.history()
}

// deniedHistory: one owner's lease without ttl, then n verifies answered
// false (wrongly denied), every 1000th one true; and a second owner granted
// the lock now and then (an owner conflict inside the first's span).
func deniedHistory(n int) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	b.add(0, 0, 100, history.OK, history.Op{F: history.FAcquire, Key: keyName(0), Owner: "a"})
	for i := 1; len(b.ops) < n; i++ {
		now := int64(i) * 1000
		v := history.ValueFalse
		if i%1000 == 0 {
			v = history.ValueTrue
		}
		b.add(1, now, now+100, history.OK, history.Op{F: history.FVerify, Key: keyName(0), Owner: "a", Value: v})
		if i%100 == 0 {
			b.add(2, now+200, now+300, history.OK, history.Op{F: history.FAcquire, Key: keyName(0), Owner: fmt.Sprint("b", i)})
		}
	}
	b.add(1, int64(n+1)*1000, int64(n+1)*1000+100, history.OK, history.Op{F: history.FVerify, Key: keyName(0), Owner: "a", Value: history.ValueTrue})
	return b.history()
}

func benchViolating(b *testing.B, h *history.History, check func(*history.History, Options) Result) {
	b.Helper()
	b.ResetTimer()
	var r Result
	for k := 0; k < b.N; k++ {
		r = check(h, Options{})
	}
	b.StopTimer()
	if r.Verdict != Fail || len(r.Reaches) < len(h.Ops)/10 {
		b.Fatalf("%d reaches: %s", len(r.Reaches), describe(r))
	}
	b.ReportMetric(float64(len(h.Ops)), "ops")
}

// BenchmarkViolating runs the overlap, capacity and lease-protocol checkers
// on 50k-operation histories violating at nearly every operation.
func BenchmarkViolating(b *testing.B) {
	const n = 50_000
	b.Run("exclusion-50k", func(b *testing.B) { benchViolating(b, overlapHistory(n, history.FAcquire), CheckExclusion) })
	b.Run("rw-exclusion-50k", func(b *testing.B) { benchViolating(b, rwOverlapHistory(n), CheckReadWrite) })
	b.Run("semaphore-50k", func(b *testing.B) { benchViolating(b, overCapacityHistory(n), CheckSemaphore) })
	b.Run("lease-protocol-50k", func(b *testing.B) { benchViolating(b, deniedHistory(n), CheckLeaseProtocol) })
}
