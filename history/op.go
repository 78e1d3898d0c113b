// Package history records the operations a workload performs and reads and
// writes them as JSON Lines, one record per line.
//
// A history is a sequence of records ([Op]). Each operation appears twice: an
// [Invoke] record when a process starts it and one completion record when it
// ends: [OK] (it happened), [Fail] (it definitely did not happen) or [Info] (its
// outcome is unknown: it may have happened, possibly later). A process has at
// most one operation in flight. Times are nanoseconds on the recorder's
// monotonic clock and never go backwards.
//
// [Recorder] captures a history from concurrent processes, [Encoder] and
// [Decoder] write and read the JSONL form (specified in FORMAT.md, so that a
// service written in any language can produce it), and [New] pairs invocations
// with their completions into [Operation] values, which is what the checkers
// in package models consume.
//
// The package imports only the standard library: no Redis client, no sockets.
package history

import (
	"fmt"
	"math"
)

// Type is the kind of a record: an invocation or one of the three outcomes.
type Type uint8

// Record types. The zero Type is invalid: every record must have one.
const (
	// Invoke starts an operation.
	Invoke Type = iota + 1
	// OK completes an operation that happened.
	OK
	// Fail completes an operation that definitely did not happen.
	Fail
	// Info completes an operation whose outcome is unknown: it may or may not
	// have happened, possibly after the completion was recorded.
	Info
)

var typeNames = [...]string{"", "invoke", "ok", "fail", "info"}

// String returns the JSON name of t ("invoke", "ok", "fail" or "info"), or a
// placeholder for an invalid value.
func (t Type) String() string {
	if t >= Invoke && t <= Info {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Valid reports whether t is one of the four record types.
func (t Type) Valid() bool { return t >= Invoke && t <= Info }

// Completion reports whether t is a completion type (OK, Fail or Info).
func (t Type) Completion() bool { return t >= OK && t <= Info }

// MarshalText encodes t by name; an invalid Type is an error.
func (t Type) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("history: invalid record type %d", uint8(t))
	}
	return []byte(typeNames[t]), nil
}

// UnmarshalText decodes a type name; anything but the four names is an error.
func (t *Type) UnmarshalText(b []byte) error {
	v, ok := parseType(b)
	if !ok {
		return fmt.Errorf("history: unknown record type %q", b)
	}
	*t = v
	return nil
}

func parseType(b []byte) (Type, bool) {
	switch string(b) {
	case "invoke":
		return Invoke, true
	case "ok":
		return OK, true
	case "fail":
		return Fail, true
	case "info":
		return Info, true
	}
	return 0, false
}

// Op is one record of a history: one line of the JSONL form. Fields that do not
// apply to an operation are left zero and omitted from the JSON; a zero value
// and an absent field mean the same thing. FORMAT.md lists which operation
// (F) uses which field, and on which record.
type Op struct {
	// I numbers the records: strictly increasing through a history.
	I int64 `json:"i"`
	// Process is the logical process (client, thread, goroutine) that performs
	// the operation; non-negative. A process has at most one operation in
	// flight.
	Process int `json:"proc"`
	// Type is invoke, ok, fail or info.
	Type Type `json:"type"`
	// F names the operation: "acquire", "release", "write", "allow", ...
	F string `json:"f"`
	// Key is the object operated on: lock or lease key, semaphore, latch,
	// limiter, or the name of a fenced resource.
	Key string `json:"key,omitempty"`
	// Field is the hash field of a hash-field lease; (Key, Field) names the lease.
	Field string `json:"field,omitempty"`
	// Token is a fencing token: granted by an acquisition, or held by a writer.
	Token int64 `json:"token,omitempty"`
	// Owner is the random owner token a lease, lock or permit was granted with.
	Owner string `json:"owner,omitempty"`
	// TTLMs is a time to live in milliseconds; zero means no expiry.
	TTLMs int64 `json:"ttl_ms,omitempty"`
	// Value is a value written, or the result of an operation that returns a
	// word ("true"/"false" for a latch wait, "released"/"not_owned"/
	// "already_released" for a release), or the listing of a leak scan.
	Value string `json:"value,omitempty"`
	// Err is the error text of a fail or info completion, for humans.
	Err string `json:"err,omitempty"`
	// N is a number of permits (rate limiter request, semaphore weight);
	// zero means one.
	N int64 `json:"n,omitempty"`
	// Count is a latch count: the initial count of a create/reset invocation,
	// the remaining count returned by a count-down (-1: generation replaced),
	// the number of entries a leak scan found, the validity a Redlock
	// acquisition claimed (µs), or the RetryAfter a denied allow answered
	// (µs).
	Count int64 `json:"count,omitempty"`
	// Gen is a latch generation: returned by create/reset/join, carried by
	// count-down and wait invocations. Generations of one key increase with
	// every reset.
	Gen int64 `json:"gen,omitempty"`
	// Seq is the position at which a fenced resource applied (or rejected) a
	// write: strictly increasing in the resource's own order. Optional.
	Seq int64 `json:"seq,omitempty"`
	// Capacity is the configured capacity of a semaphore.
	Capacity int64 `json:"capacity,omitempty"`
	// Algo is the rate-limit algorithm: "fixed", "sliding" or "bucket".
	Algo string `json:"algo,omitempty"`
	// Limit is the limit of a fixed or sliding window rate limiter.
	Limit int64 `json:"limit,omitempty"`
	// WindowMs is the window of a fixed or sliding window limiter, in ms.
	WindowMs int64 `json:"window_ms,omitempty"`
	// Segments is the number of segments of a sliding window limiter.
	Segments int64 `json:"segments,omitempty"`
	// Burst is the capacity (token limit) of a token bucket limiter.
	Burst int64 `json:"burst,omitempty"`
	// Rate is the number of tokens a token bucket gains per PeriodMs.
	Rate int64 `json:"rate,omitempty"`
	// PeriodMs is the refill period of a token bucket limiter, in ms.
	PeriodMs int64 `json:"period_ms,omitempty"`
	// DriftUs is, on a Redlock acquisition's ok, the clock-drift allowance
	// the implementation declares for the lease's ttl, in µs: the validity
	// it may claim (Count) is at most ttl − the time the acquisition took −
	// this. Zero or absent: none declared.
	DriftUs int64 `json:"drift_us,omitempty"`
	// Explains lists, on a nemesis effect record, the violation kinds the
	// proven effect can explain, comma-separated (empty: any).
	Explains string `json:"explains,omitempty"`
	// T is the time of the record in nanoseconds on the recorder's monotonic
	// clock; non-negative and non-decreasing through a history.
	T int64 `json:"t"`
}

// Never is the Return time of an operation that never completed.
const Never int64 = math.MaxInt64

// Operation is an invocation paired with its completion.
//
// The embedded Op holds the fields of the invoke record, overridden by every
// non-zero field of the completion record, except that I and T are those of
// the invoke and Type is the outcome. An operation whose process never
// completed it is an Info operation with Done false and Return [Never].
type Operation struct {
	Op
	// Return is the time of the completion record, or Never.
	Return int64 `json:"return"`
	// ReturnI is the I of the completion record, or -1.
	ReturnI int64 `json:"return_i"`
	// Done reports whether the history has a completion record.
	Done bool `json:"done"`
}

// Call is the invoke time (an alias of T, for readability).
func (o *Operation) Call() int64 { return o.T }

// Weight is N, or 1 when N is zero.
func (o *Operation) Weight() int64 {
	if o.N == 0 {
		return 1
	}
	return o.N
}

// String describes the operation in one line, for evidence and logs.
func (o *Operation) String() string {
	s := fmt.Sprintf("#%d proc %d %s", o.I, o.Process, o.F)
	if o.Key != "" {
		s += fmt.Sprintf(" key=%q", o.Key)
	}
	if o.Field != "" {
		s += fmt.Sprintf(" field=%q", o.Field)
	}
	s += " " + o.Type.String()
	if o.Token != 0 {
		s += fmt.Sprintf(" token=%d", o.Token)
	}
	if o.TTLMs != 0 {
		s += fmt.Sprintf(" ttl=%dms", o.TTLMs)
	}
	if o.Gen != 0 {
		s += fmt.Sprintf(" gen=%d", o.Gen)
	}
	if o.Count != 0 {
		s += fmt.Sprintf(" count=%d", o.Count)
	}
	if o.N != 0 {
		s += fmt.Sprintf(" n=%d", o.N)
	}
	if o.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", o.Seq)
	}
	if o.Value != "" {
		s += fmt.Sprintf(" value=%q", o.Value)
	}
	if o.Err != "" {
		s += fmt.Sprintf(" err=%q", o.Err)
	}
	if o.Done {
		s += fmt.Sprintf(" [%d, %d]", o.T, o.Return)
	} else {
		s += fmt.Sprintf(" [%d, never completed]", o.T)
	}
	return s
}

// merge overrides the fields of o with the non-zero fields of c.
func (o *Op) merge(c *Op) {
	o.Type = c.Type
	if c.Key != "" {
		o.Key = c.Key
	}
	if c.Field != "" {
		o.Field = c.Field
	}
	if c.Token != 0 {
		o.Token = c.Token
	}
	if c.Owner != "" {
		o.Owner = c.Owner
	}
	if c.TTLMs != 0 {
		o.TTLMs = c.TTLMs
	}
	if c.Value != "" {
		o.Value = c.Value
	}
	if c.Err != "" {
		o.Err = c.Err
	}
	if c.N != 0 {
		o.N = c.N
	}
	if c.Count != 0 {
		o.Count = c.Count
	}
	if c.Gen != 0 {
		o.Gen = c.Gen
	}
	if c.Seq != 0 {
		o.Seq = c.Seq
	}
	if c.Capacity != 0 {
		o.Capacity = c.Capacity
	}
	if c.Algo != "" {
		o.Algo = c.Algo
	}
	if c.Explains != "" {
		o.Explains = c.Explains
	}
	if c.Limit != 0 {
		o.Limit = c.Limit
	}
	if c.WindowMs != 0 {
		o.WindowMs = c.WindowMs
	}
	if c.Segments != 0 {
		o.Segments = c.Segments
	}
	if c.Burst != 0 {
		o.Burst = c.Burst
	}
	if c.Rate != 0 {
		o.Rate = c.Rate
	}
	if c.PeriodMs != 0 {
		o.PeriodMs = c.PeriodMs
	}
	if c.DriftUs != 0 {
		o.DriftUs = c.DriftUs
	}
}

// History is a well-formed history: its records and its operations.
type History struct {
	// Records are the records in order.
	Records []Op
	// Ops are the operations, in the order of their invocations.
	Ops []Operation
	// End is the time of the last record (0 for an empty history).
	End int64
	// Header is the history's header, nil when it has none (Read sets it).
	Header *Header
	// Cut says how the history was cut short by its writer, nil when it
	// was not (ReadTolerant sets it).
	Cut *Cut
}

// New checks that records form a well-formed history (the rules of FORMAT.md:
// increasing I, non-decreasing T, one operation in flight per process, every
// completion preceded by its invoke) and pairs invocations with completions.
// A malformed history is an *Error whose Line is the 1-based record number.
func New(records []Op) (*History, error) {
	var v validator
	for k := range records {
		if e := v.check(&records[k], k+1); e != nil {
			return nil, &Error{Line: k + 1, Msg: e.msg}
		}
	}
	return build(records, false), nil
}

// build pairs the records of a history already checked by a validator;
// huge: its operations may be put in huge pages (adviseHugePages).
func build(records []Op, huge bool) *History {
	h := &History{Records: records}
	ops := make([]Operation, 0, len(records)/2+1)
	if huge {
		adviseHugePages(ops)
	}
	pending := make(map[int]int) // process → index in ops
	for k := range records {
		r := &records[k]
		if r.T > h.End {
			h.End = r.T
		}
		if r.Type == Invoke {
			pending[r.Process] = len(ops)
			ops = append(ops, Operation{Op: *r, Return: Never, ReturnI: -1})
			ops[len(ops)-1].Type = Info
			continue
		}
		j := pending[r.Process]
		delete(pending, r.Process)
		o := &ops[j]
		o.merge(r)
		o.Return = r.T
		o.ReturnI = r.I
		o.Done = true
	}
	h.Ops = ops
	return h
}

// Error is a malformed record: where it is and what is wrong with it.
type Error struct {
	// Line is the 1-based line number (from a Decoder) or record number (from New).
	Line int
	// Column is the 1-based byte offset in the line of the offending value, or
	// 0 when not known (records checked by New).
	Column int
	// Msg says what is wrong.
	Msg string
}

// Error formats the error as "line L, column C: message".
func (e *Error) Error() string {
	if e.Column > 0 {
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("record %d: %s", e.Line, e.Msg)
}

// validator enforces the well-formedness rules one record at a time.
type validator struct {
	n        int
	lastI    int64
	lastT    int64
	inflight map[int]inflight
}

type inflight struct {
	f, key string
	line   int
}

// vErr is a validation error and the field it blames (for the column).
type vErr struct {
	field int
	msg   string
}

func (v *validator) check(op *Op, line int) *vErr {
	if !op.Type.Valid() {
		return &vErr{fType, "missing record type (want invoke, ok, fail or info)"}
	}
	if v.n > 0 && op.I <= v.lastI {
		return &vErr{fI, fmt.Sprintf("record number i=%d not greater than the previous one (%d)", op.I, v.lastI)}
	}
	if op.T < 0 {
		return &vErr{fT, fmt.Sprintf("negative time t=%d", op.T)}
	}
	if v.n > 0 && op.T < v.lastT {
		return &vErr{fT, fmt.Sprintf("time goes backwards: t=%d after t=%d", op.T, v.lastT)}
	}
	if op.Process < 0 {
		return &vErr{fProc, fmt.Sprintf("negative process %d", op.Process)}
	}
	if v.inflight == nil {
		v.inflight = make(map[int]inflight)
	}
	cur, busy := v.inflight[op.Process]
	if op.Type == Invoke {
		if op.F == "" {
			return &vErr{fF, "invoke without an operation name f"}
		}
		if busy {
			return &vErr{fProc, fmt.Sprintf("process %d invokes %s while its %s from line %d is still in flight", op.Process, op.F, cur.f, cur.line)}
		}
		v.inflight[op.Process] = inflight{op.F, op.Key, line}
	} else {
		if !busy {
			return &vErr{fType, fmt.Sprintf("%s completion for process %d, which has no operation in flight", op.Type, op.Process)}
		}
		if op.F != "" && op.F != cur.f {
			return &vErr{fF, fmt.Sprintf("completion f=%q does not match the invoke f=%q at line %d", op.F, cur.f, cur.line)}
		}
		if op.Key != "" && cur.key != "" && op.Key != cur.key {
			return &vErr{fKey, fmt.Sprintf("completion key %q does not match the invoke key %q at line %d", op.Key, cur.key, cur.line)}
		}
		delete(v.inflight, op.Process)
	}
	v.n++
	v.lastI = op.I
	v.lastT = op.T
	return nil
}
