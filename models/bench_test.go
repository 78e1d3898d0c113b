package models

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// The benchmarks build correct histories of n operations directly as
// history.History values (the checkers read only Ops and End) and check that
// the checker passes. The budgets: the fenced-resource oracle and
// the interval checkers under 2 s for 1,000,000 operations, porcupine's
// token order under 1 s for 10,000 operations of 8 processes.

const million = 1_000_000

type opsBuilder struct {
	ops []history.Operation
	end int64
}

func (b *opsBuilder) add(proc int, call, ret int64, typ history.Type, op history.Op) {
	op.I, op.Process, op.Type, op.T = int64(len(b.ops)), proc, typ, call
	b.ops = append(b.ops, history.Operation{Op: op, Return: ret, ReturnI: int64(len(b.ops)), Done: true})
	b.end = max(b.end, ret)
}

func (b *opsBuilder) history() *history.History {
	slices.SortStableFunc(b.ops, func(x, y history.Operation) int { return int(x.T - y.T) })
	return &history.History{Ops: b.ops, End: b.end}
}

func keyName(k int) string { return fmt.Sprintf("{k:%d}", k) }

// fencedHistory: 8 writers on 16 resources, overlapping writes, tokens
// increasing with repeats, every 50th write stale and rejected.
func fencedHistory(n int, seq bool) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	const resources = 16
	for i := 0; i < n; i++ {
		r := i % resources
		j := i / resources
		t := int64(j) * 100
		op := history.Op{F: history.FWrite, Key: keyName(r), Token: int64(1 + j/10)}
		typ := history.OK
		if j%50 == 49 {
			op.Token -= 5
			typ = history.Fail
		}
		if seq {
			op.Seq = int64(j + 1)
		}
		b.add(i%8, t, t+250, typ, op)
	}
	return b.history()
}

// lockHistory: n operations (acquisitions and releases) on 1000 locks; per
// lock, holders follow each other (release, then the next acquisition), a
// third of the leases expire instead of being released.
func lockHistory(n int, f string) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	const keys = 1000
	var tok [keys]int64
	var t [keys]int64
	for i := 0; len(b.ops) < n; i++ {
		k := i % keys
		key := keyName(k)
		now := t[k]
		tok[k]++
		proc := i % 64
		b.add(proc, now, now+100, history.OK, history.Op{F: f, Key: key, Token: tok[k], TTLMs: 1, Owner: fmt.Sprint(i)})
		if i%3 == 0 {
			t[k] = now + 1_000_000 + 50 // expired: invoke + ttl before the next acquisition returns
			continue
		}
		if len(b.ops) < n {
			b.add(proc, now+500, now+600, history.OK, history.Op{F: history.FRelease, Key: key, Owner: fmt.Sprint(i)})
		}
		t[k] = now + 550
	}
	return b.history()
}

// semHistory: permits of capacity 4 on 1000 semaphores, four at a time.
func semHistory(n int) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	const keys = 1000
	for i := 0; len(b.ops) < n; i++ {
		k := i % keys
		slot := (i / keys) % 4
		round := int64(i / keys / 4)
		now := round*1000 + int64(slot)*10
		b.add(i%64, now, now+100, history.OK, history.Op{F: history.FSemAcquire, Key: keyName(k), Capacity: 4, Owner: fmt.Sprint(i)})
		if len(b.ops) < n {
			b.add(i%64, now+800, now+900, history.OK, history.Op{F: history.FRelease, Key: keyName(k), Owner: fmt.Sprint(i)})
		}
	}
	return b.history()
}

// rateHistory: grants within the bound on 100 limiters.
func rateHistory(n int, algo string) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	const keys = 100
	for i := 0; i < n; i++ {
		k := i % keys
		j := int64(i / keys)
		op := history.Op{F: history.FAllow, Key: keyName(k), Algo: algo}
		var t int64
		switch algo {
		case history.AlgoFixed:
			op.Limit, op.WindowMs = 10, 1
			t = j * 100_000 // 10 per ms
		case history.AlgoSliding:
			op.Limit, op.WindowMs, op.Segments = 10, 1, 10
			t = j * 100_000
		case history.AlgoBucket:
			op.Burst, op.Rate, op.PeriodMs = 10, 10, 1
			t = j * 100_000
		}
		b.add(i%64, t, t+1000, history.OK, op)
	}
	return b.history()
}

// waitHistory: per lock, a holder releases and a waiter that has been
// waiting acquires right after; n operations.
func waitHistory(n int) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	const keys = 1000
	var t [keys]int64
	for i := 0; len(b.ops) < n; i++ {
		k := i % keys
		now := t[k]
		// The waiter was invoked before the previous holder released.
		b.add(i%64, now-300, now+100, history.OK, history.Op{F: history.FAcquireWait, Key: keyName(k), TTLMs: 1, Owner: fmt.Sprint(i)})
		if len(b.ops) < n {
			b.add(i%64, now+500, now+600, history.OK, history.Op{F: history.FRelease, Key: keyName(k), Owner: fmt.Sprint(i)})
		}
		t[k] = now + 650
	}
	return b.history()
}

// latchHistory: generations of count 8 on 1000 latches, counted down one
// after another, with a wait each.
func latchHistory(n int) *history.History {
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	const keys = 1000
	gen := make([]int64, keys)
	t := make([]int64, keys)
	for i := 0; len(b.ops) < n; i++ {
		k := i % keys
		key := keyName(k)
		gen[k]++
		now := t[k]
		b.add(0, now, now+10, history.OK, history.Op{F: history.FLatchReset, Key: key, Count: 8, Gen: gen[k]})
		for c := int64(7); c >= 0 && len(b.ops) < n; c-- {
			now += 20
			b.add(1+int(c), now, now+10, history.OK, history.Op{F: history.FLatchCountDown, Key: key, Gen: gen[k], Count: c})
		}
		if len(b.ops) < n {
			b.add(9, t[k]+15, now+15, history.OK, history.Op{F: history.FLatchWait, Key: key, Gen: gen[k], Value: history.ValueTrue})
		}
		t[k] = now + 20
	}
	return b.history()
}

// tokenHistory: 8 processes acquire on 4 keys with random durations; each
// acquisition takes effect at a random instant of its interval and gets the
// key's next token then; 2% have unknown outcome.
func tokenHistory(n int, seed uint64) *history.History {
	r := rand.New(rand.NewPCG(seed, 7))
	type ev struct {
		at   int64
		op   int
		skip bool
	}
	b := &opsBuilder{ops: make([]history.Operation, 0, n)}
	var evs []ev
	var free [8]int64
	for i := 0; i < n; i++ {
		p := i % 8
		call := free[p] + r.Int64N(50)
		ret := call + 1 + r.Int64N(200)
		free[p] = ret + 1
		typ := history.OK
		if r.IntN(50) == 0 {
			typ = history.Info
		}
		b.add(p, call, ret, typ, history.Op{F: history.FAcquire, Key: keyName(r.IntN(4)), TTLMs: 1})
		evs = append(evs, ev{call + r.Int64N(ret-call+1), len(b.ops) - 1, typ == history.Info && r.IntN(2) == 0})
	}
	slices.SortFunc(evs, func(x, y ev) int { return int(x.at - y.at) })
	next := map[string]int64{}
	for _, e := range evs {
		op := &b.ops[e.op]
		if e.skip {
			continue
		}
		next[op.Key]++
		if op.Type == history.OK {
			op.Token = next[op.Key]
		}
	}
	for k := range b.ops {
		if b.ops[k].Type == history.Info {
			b.ops[k].Done = false
			b.ops[k].Return = history.Never
		}
	}
	return b.history()
}

func benchCheck(b *testing.B, h *history.History, check func(*history.History, Options) Result, o Options) {
	b.Helper()
	b.ResetTimer()
	var r Result
	for k := 0; k < b.N; k++ {
		r = check(h, o)
	}
	b.StopTimer()
	if r.Verdict != Pass {
		b.Fatalf("%s", describe(r))
	}
	b.ReportMetric(float64(len(h.Ops)), "ops")
}

func BenchmarkFencedResource(b *testing.B) {
	b.Run("realtime-1M", func(b *testing.B) { benchCheck(b, fencedHistory(million, false), CheckFencedResource, Options{}) })
	b.Run("seq-1M", func(b *testing.B) { benchCheck(b, fencedHistory(million, true), CheckFencedResource, Options{}) })
}

func BenchmarkExclusion1M(b *testing.B) {
	benchCheck(b, lockHistory(million, history.FAcquire), CheckExclusion, Options{})
}

func BenchmarkReadWrite1M(b *testing.B) {
	benchCheck(b, lockHistory(million, history.FAcquireWrite), CheckReadWrite, Options{})
}

func BenchmarkSemaphore1M(b *testing.B) {
	benchCheck(b, semHistory(million), CheckSemaphore, Options{})
}

func BenchmarkRateLimit(b *testing.B) {
	for _, algo := range []string{history.AlgoFixed, history.AlgoSliding, history.AlgoBucket} {
		b.Run(algo+"-1M", func(b *testing.B) { benchCheck(b, rateHistory(million, algo), CheckRateLimit, Options{}) })
	}
}

func BenchmarkLiveness1M(b *testing.B) {
	benchCheck(b, waitHistory(million), CheckLiveness, Options{WakeBound: time.Microsecond})
}

func BenchmarkLatch1M(b *testing.B) { benchCheck(b, latchHistory(million), CheckLatch, Options{}) }

func BenchmarkTokenOrderPorcupine10k(b *testing.B) {
	benchCheck(b, tokenHistory(10_000, 1), CheckTokenOrder, Options{Timeout: time.Minute})
}

func BenchmarkTokenOrderPorcupineDense10k(b *testing.B) {
	benchCheck(b, tokenHistory(10_000, 1), CheckTokenOrder, Options{Timeout: time.Minute, DenseTokens: true})
}

// TestGeneratedHistoriesPass keeps the benchmark generators honest at a
// small size: well-formed and passing (and mutated, failing).
func TestGeneratedHistoriesPass(t *testing.T) {
	const n = 20_000
	cases := []struct {
		name  string
		h     *history.History
		check func(*history.History, Options) Result
		o     Options
	}{
		{"fenced", fencedHistory(n, false), CheckFencedResource, Options{}},
		{"fenced-seq", fencedHistory(n, true), CheckFencedResource, Options{}},
		{"exclusion", lockHistory(n, history.FAcquire), CheckExclusion, Options{}},
		{"rw", lockHistory(n, history.FAcquireWrite), CheckReadWrite, Options{}},
		{"semaphore", semHistory(n), CheckSemaphore, Options{}},
		{"fixed", rateHistory(n, history.AlgoFixed), CheckRateLimit, Options{}},
		{"sliding", rateHistory(n, history.AlgoSliding), CheckRateLimit, Options{}},
		{"bucket", rateHistory(n, history.AlgoBucket), CheckRateLimit, Options{}},
		{"liveness", waitHistory(n), CheckLiveness, Options{WakeBound: time.Microsecond}},
		{"latch", latchHistory(n), CheckLatch, Options{}},
		{"tokens", tokenHistory(2000, 3), CheckTokenOrder, Options{}},
		{"tokens-dense", tokenHistory(2000, 3), CheckTokenOrder, Options{DenseTokens: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expect(t, c.check(c.h, c.o), Pass)
			// Break it: copy one operation's interval onto the middle of
			// the history with a conflicting outcome.
			mut := *c.h
			mut.Ops = slices.Clone(c.h.Ops)
			mutate(t, c.name, &mut)
			if r := c.check(&mut, c.o); r.Verdict != Fail {
				t.Errorf("mutated %s history: %s", c.name, describe(r))
			}
		})
	}
}

// mutate breaks a generated history in a way its checker must notice.
func mutate(t *testing.T, name string, h *history.History) {
	mid := len(h.Ops) / 2
	first := func(pred func(*history.Operation) bool) *history.Operation {
		for k := mid; k < len(h.Ops); k++ {
			if pred(&h.Ops[k]) {
				return &h.Ops[k]
			}
		}
		t.Fatalf("%s: nothing to mutate", name)
		return nil
	}
	switch name {
	case "fenced", "fenced-seq":
		first(func(o *history.Operation) bool { return o.Type == history.Fail }).Type = history.OK
	case "exclusion", "rw", "liveness":
		r := first(func(o *history.Operation) bool { return o.F == history.FRelease })
		if name == "liveness" {
			// The next waiter takes far too long.
			for k := range h.Ops {
				if o := &h.Ops[k]; o.F == history.FAcquireWait && o.Key == r.Key && o.T > r.T {
					o.Return += 10_000
					break
				}
			}
			return
		}
		r.F, r.Key = "noop", "" // a lost release: the lease stays until its expiry
	case "semaphore":
		first(func(o *history.Operation) bool { return o.F == history.FSemAcquire }).Capacity = 0
		for k := range h.Ops {
			h.Ops[k].Capacity = min(h.Ops[k].Capacity, 3)
		}
	case "fixed", "sliding", "bucket":
		o := first(func(o *history.Operation) bool { return true })
		for k := 0; k < 25; k++ {
			c := *o
			h.Ops = append(h.Ops, c)
		}
	case "latch":
		first(func(o *history.Operation) bool { return o.F == history.FLatchCountDown && o.Count == 5 }).Count = 4
	case "tokens", "tokens-dense":
		o := first(func(o *history.Operation) bool { return o.Type == history.OK })
		o.Token -= 3
	}
}
