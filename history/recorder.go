package history

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Errors of a Recorder, usable with errors.Is.
var (
	// ErrInFlight: the process already has an operation in flight.
	ErrInFlight = errors.New("history: process already has an operation in flight")
	// ErrNotInFlight: a completion for a process with no operation in flight.
	ErrNotInFlight = errors.New("history: process has no operation in flight")
	// ErrBadRecord: the record given to the Recorder is unusable (no f, a
	// negative process, a completion type that is not ok/fail/info, an f or
	// key that contradicts the invocation).
	ErrBadRecord = errors.New("history: bad record")
)

// Recorder captures a history from concurrent processes. It is safe for
// concurrent use. Times are nanoseconds since the start time on Go's monotonic
// clock, so wall-clock steps do not affect them, and never decrease. A process
// has at most one operation in flight: Invoke fails with ErrInFlight when it
// already has one, and a completion fails with ErrNotInFlight when it has none.
type Recorder struct {
	mu       sync.Mutex
	start    time.Time
	last     int64
	next     int64
	records  []Op
	inflight map[int]int // process → index of its invoke record
}

// NewRecorder returns a Recorder whose clock counts from start, which should
// come from time.Now() (so that it carries a monotonic clock reading). A
// history's times are relative to its own start: t=0 is start.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{start: start, inflight: make(map[int]int)}
}

// now returns the next timestamp; r.mu is held.
func (r *Recorder) now() int64 {
	t := int64(time.Since(r.start))
	if t < r.last {
		t = r.last
	}
	r.last = t
	return t
}

// Now returns the current time of the recorder's clock, in nanoseconds.
func (r *Recorder) Now() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now()
}

// Invoke records the start of an operation by proc. op carries F (required),
// Key and the input fields; I, Process, Type and T are set by the Recorder.
// It returns the stored record.
func (r *Recorder) Invoke(proc int, op Op) (Op, error) {
	if op.F == "" {
		return Op{}, fmt.Errorf("%w: invoke without f", ErrBadRecord)
	}
	if proc < 0 {
		return Op{}, fmt.Errorf("%w: negative process %d", ErrBadRecord, proc)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, busy := r.inflight[proc]; busy {
		return Op{}, fmt.Errorf("%w: process %d, %s invoked at t=%d", ErrInFlight, proc, r.records[k].F, r.records[k].T)
	}
	op.I, op.Process, op.Type, op.T = r.next, proc, Invoke, r.now()
	r.next++
	r.inflight[proc] = len(r.records)
	r.records = append(r.records, op)
	return op, nil
}

// Complete records the end of proc's operation in flight with outcome typ
// (OK, Fail or Info). op carries the output fields; F and Key default to
// those of the invocation. It returns the stored record.
func (r *Recorder) Complete(proc int, typ Type, op Op) (Op, error) {
	if !typ.Completion() {
		return Op{}, fmt.Errorf("%w: completion type %v", ErrBadRecord, typ)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k, busy := r.inflight[proc]
	if !busy {
		return Op{}, fmt.Errorf("%w: process %d", ErrNotInFlight, proc)
	}
	inv := &r.records[k]
	if op.F == "" {
		op.F = inv.F
	} else if op.F != inv.F {
		return Op{}, fmt.Errorf("%w: completion f=%q for invoke f=%q", ErrBadRecord, op.F, inv.F)
	}
	if op.Key == "" {
		op.Key = inv.Key
	} else if inv.Key != "" && op.Key != inv.Key {
		return Op{}, fmt.Errorf("%w: completion key %q for invoke key %q", ErrBadRecord, op.Key, inv.Key)
	}
	delete(r.inflight, proc)
	op.I, op.Process, op.Type, op.T = r.next, proc, typ, r.now()
	r.next++
	r.records = append(r.records, op)
	return op, nil
}

// OK records that proc's operation in flight happened.
func (r *Recorder) OK(proc int, op Op) (Op, error) { return r.Complete(proc, OK, op) }

// Fail records that proc's operation in flight definitely did not happen.
func (r *Recorder) Fail(proc int, op Op) (Op, error) { return r.Complete(proc, Fail, op) }

// Info records that the outcome of proc's operation in flight is unknown.
func (r *Recorder) Info(proc int, op Op) (Op, error) { return r.Complete(proc, Info, op) }

// InFlight reports whether proc has an operation in flight.
func (r *Recorder) InFlight(proc int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, busy := r.inflight[proc]
	return busy
}

// Records returns a copy of the records so far.
func (r *Recorder) Records() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.records...)
}

// History returns the history so far, paired. Operations still in flight are
// Info operations that never completed.
func (r *Recorder) History() *History {
	return build(r.Records(), false)
}

// WriteTo writes the records so far as JSONL to w.
func (r *Recorder) WriteTo(w io.Writer) (int64, error) {
	recs := r.Records()
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	var buf []byte
	for k := range recs {
		buf = AppendRecord(buf[:0], &recs[k])
		if _, err := bw.Write(buf); err != nil {
			return cw.n, err
		}
	}
	err := bw.Flush()
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
