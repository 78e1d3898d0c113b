// Package histgen generates large, correct coordination histories in the
// JSONL form of package history, for benchmarks of the decoder, the checkers
// and fencecheck (issue 14's performance target: about a million lines of
// fenced-lock cycles on one key).
package histgen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/coordtorture/coordtorture/history"
)

// LockCycles describes a fenced-lock workload on one key: in each cycle one
// process acquires the lock (a fencing token, an owner, a ttl), writes to a
// fenced resource with its token and releases, while Contenders other
// processes try to acquire and are refused (fail).
type LockCycles struct {
	// Cycles is the number of lock cycles.
	Cycles int
	// Procs is the number of processes (at least Contenders + 1).
	Procs int
	// Contenders is the number of refused acquisitions per cycle.
	Contenders int
	// InfoEvery, when positive, makes every InfoEvery-th cycle's acquisition
	// an info operation whose command ran (its reply was lost): it consumed a
	// token and the lock stays held until its ttl expires; the process does
	// not write or release, and the next cycle starts after the expiry.
	InfoEvery int
	// TTLMs is the lease ttl in milliseconds (default 500).
	TTLMs int64
	// Seed seeds the timing jitter and the choice of processes.
	Seed uint64
}

// MillionLines is the history of issue 14's performance target: 100,000
// cycles of acquire, write and release on one key by 4 processes, with 2
// refused acquisitions per cycle: 1,000,000 lines.
var MillionLines = LockCycles{Cycles: 100_000, Procs: 4, Contenders: 2, Seed: 1}

// Lines is the number of lines Generate writes for c.
func (c LockCycles) Lines() int {
	per := 2 * (3 + c.Contenders)
	n := c.Cycles * per
	if c.InfoEvery > 0 {
		n -= (c.Cycles / c.InfoEvery) * 4 // no write, no release
	}
	return n
}

// Generate returns the history as JSONL. The history is correct: every
// checker that applies to it passes.
func (c LockCycles) Generate() []byte {
	if c.Procs < c.Contenders+1 {
		panic(fmt.Sprintf("histgen: %d processes cannot hold a lock with %d contenders", c.Procs, c.Contenders))
	}
	ttl := c.TTLMs
	if ttl == 0 {
		ttl = 500
	}
	r := rand.New(rand.NewPCG(c.Seed, 14))
	var buf bytes.Buffer
	buf.Grow(c.Lines() * 110)
	enc := history.NewEncoder(&buf)
	rtt := func() int64 { return 80_000 + r.Int64N(120_000) } // 80-200µs
	var recs []history.Op
	var i int64
	t := int64(1_000_000)
	token := int64(0)
	procs := make([]int, c.Procs)
	for k := range procs {
		procs[k] = k
	}
	for cyc := 1; cyc <= c.Cycles; cyc++ {
		recs = recs[:0]
		r.Shuffle(len(procs), func(a, b int) { procs[a], procs[b] = procs[b], procs[a] })
		w := procs[0]
		token++
		owner := fmt.Sprintf("%016x", r.Uint64())
		key := "lock"
		info := c.InfoEvery > 0 && cyc%c.InfoEvery == 0
		acq := t
		got := acq + rtt()
		recs = append(recs, history.Op{Process: w, Type: history.Invoke, F: history.FAcquire, Key: key, TTLMs: ttl, T: acq})
		if info {
			recs = append(recs, history.Op{Process: w, Type: history.Info, F: history.FAcquire, Key: key, Err: "i/o timeout", T: got + 250_000_000})
		} else {
			recs = append(recs, history.Op{Process: w, Type: history.OK, F: history.FAcquire, Key: key, Token: token, Owner: owner, TTLMs: ttl, T: got})
		}
		// Refused acquisitions while the lock is held.
		for k := 1; k <= c.Contenders; k++ {
			p := procs[k]
			inv := got + 1 + r.Int64N(100_000)
			recs = append(recs,
				history.Op{Process: p, Type: history.Invoke, F: history.FAcquire, Key: key, TTLMs: ttl, T: inv},
				history.Op{Process: p, Type: history.Fail, F: history.FAcquire, Key: key, T: inv + rtt()})
		}
		var end int64
		if info {
			// Held until its ttl expires; the next cycle starts after that.
			end = max(acq+ttl*1_000_000, got+250_000_000) + 1_000_000
		} else {
			wr := got + 10_000
			wrDone := wr + rtt()
			value := fmt.Sprintf("v%d", cyc)
			rel := wrDone + 10_000
			relDone := rel + rtt()
			recs = append(recs,
				history.Op{Process: w, Type: history.Invoke, F: history.FWrite, Key: "resource", Token: token, Owner: owner, Value: value, T: wr},
				history.Op{Process: w, Type: history.OK, F: history.FWrite, Key: "resource", T: wrDone},
				history.Op{Process: w, Type: history.Invoke, F: history.FRelease, Key: key, Owner: owner, T: rel},
				history.Op{Process: w, Type: history.OK, F: history.FRelease, Key: key, Value: "released", T: relDone})
			end = relDone
		}
		slices.SortStableFunc(recs, func(a, b history.Op) int { return int(a.T - b.T) })
		for k := range recs {
			i++
			recs[k].I = i
			end = max(end, recs[k].T)
			if err := enc.Encode(&recs[k]); err != nil {
				panic(err)
			}
		}
		t = end + 1 + r.Int64N(50_000)
	}
	return buf.Bytes()
}
