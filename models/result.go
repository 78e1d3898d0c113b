// Package models judges recorded histories (package history): porcupine
// linearizability models where linearizability is the question, and direct
// O(n log n) interval algorithms (sort + sweep) where the property is a bound.
//
// Every checker takes a *history.History and Options and returns a Result: a
// Verdict (PASS, FAIL or UNKNOWN, never PASS when a search timed out), a
// one-line summary, and Evidence for each violation: the operations involved
// with their processes, times and tokens, and for porcupine failures and
// timeouts the HTML visualization. Checkers is the registry the fencecheck CLI
// runs; Applicable picks the checkers that apply to the operations present.
//
// Conventions shared by all checkers (FORMAT.md in package history has the
// record format):
//
//   - Only ok operations happened. fail operations did not and are dropped;
//     info operations (and operations that never completed) may or may not
//     have happened, at any time after their invocation, and a checker only
//     reports what is a violation whichever way they went.
//   - An operation took effect at some instant between its invoke time T and
//     its completion time Return. Two operations are ordered in real time
//     only when one completed strictly before the other was invoked.
//   - A holder's validity window is what the holder may act on: it starts when
//     the acquisition returns (the holder cannot know earlier) and ends at the
//     first of its release's invocation and invoke-time + ttl (extended by
//     renewals) minus the drift allowance: [Return, min(release.T, T+ttl−drift)).
//     A correct server never grants a lease while another's window is open,
//     because that window ends no later than the server-side expiry.
//
// The package imports only the standard library and porcupine: no Redis
// client, no sockets.
package models

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// Verdict is the outcome of one checker on one history.
type Verdict uint8

// Verdicts, from best to worst for exit codes: PASS, UNKNOWN, FAIL.
const (
	// Pass: the property holds on this history.
	Pass Verdict = iota
	// Fail: the history violates the property; Evidence shows where.
	Fail
	// Unknown: the checker could not decide (timeout, missing information).
	Unknown
)

// String returns "PASS", "FAIL" or "UNKNOWN".
func (v Verdict) String() string {
	switch v {
	case Pass:
		return "PASS"
	case Fail:
		return "FAIL"
	case Unknown:
		return "UNKNOWN"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// MarshalText encodes the verdict as its String.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText decodes "PASS", "FAIL" or "UNKNOWN".
func (v *Verdict) UnmarshalText(b []byte) error {
	switch string(b) {
	case "PASS":
		*v = Pass
	case "FAIL":
		*v = Fail
	case "UNKNOWN":
		*v = Unknown
	default:
		return fmt.Errorf("models: unknown verdict %q", b)
	}
	return nil
}

// Evidence is one violation (or, for UNKNOWN, one reason) and the operations
// involved, with their indices (I, ReturnI), processes, times and tokens.
type Evidence struct {
	// Kind is the violation's kind (one of the Kind… constants); empty for
	// the reasons of an UNKNOWN.
	Kind string `json:"kind,omitempty"`
	// Hazard marks, in a scenario's report, a violation counted as the
	// documented hazard the scenario is about rather than as a failure.
	Hazard bool `json:"hazard,omitempty"`
	// Key is the lock, semaphore, latch, limiter or resource concerned.
	Key string `json:"key,omitempty"`
	// Msg says what is wrong, with the relevant times.
	Msg string `json:"msg"`
	// Ops are the operations involved.
	Ops []history.Operation `json:"ops,omitempty"`
}

// String is Msg followed by one line per operation.
func (e Evidence) String() string {
	var b strings.Builder
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Msg)
	for k := range e.Ops {
		b.WriteString("\n    ")
		b.WriteString(e.Ops[k].String())
	}
	return b.String()
}

// Result is the judgement of one checker on one history.
type Result struct {
	// Checker is the name of the property checked (as in Checkers).
	Checker string `json:"checker"`
	// Verdict is PASS, FAIL or UNKNOWN.
	Verdict Verdict `json:"verdict"`
	// Summary is one line for humans.
	Summary string `json:"summary"`
	// Ops is the number of operations the checker examined.
	Ops int `json:"ops"`
	// Violations counts every violation found (Evidence holds at most
	// Options.MaxEvidence of them).
	Violations int `json:"violations"`
	// Kinds counts every violation by kind.
	Kinds map[string]int `json:"kinds,omitempty"`
	// Earliest is, for each kind, the earliest time (ns, the history's clock)
	// at which a violation of that kind was complete: the latest completion
	// among its operations (Never if one never completed), or, for an
	// overlap or permits over capacity, the instant it began. A violation
	// complete before a fault began cannot be that fault's doing.
	Earliest map[string]int64 `json:"earliest_ns,omitempty"`
	// Reaches bound where the violations of a checker that reports them
	// (rate-limit, exclusion, rw-exclusion, semaphore) lie, for attributing
	// them to a fault (Judge): a violation of a kind some Reach names counts
	// as a fault's hazard only when its Reach is within that fault's reach.
	// Empty for the other checkers, whose violations are judged by Earliest
	// alone. Not written
	// to reports (one per overlap can be many); an offline check recomputes
	// them from the history.
	Reaches []Reach `json:"-"`
	// Evidence shows the first violations of each kind, up to
	// Options.MaxEvidence per kind (or the reasons for UNKNOWN).
	Evidence []Evidence `json:"evidence,omitempty"`
	// Visualization is porcupine's HTML rendering of the history and its
	// partial linearizations, for porcupine failures and timeouts; write it
	// to a .html file and open it in a browser. Nil otherwise.
	Visualization []byte `json:"-"`
	// Elapsed is how long the check took.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Reach is where one run of a checker's violations on one key lies, and how
// far a fault's effect can reach, for Judge: a violation is a span of time
// whose operations break a bound, and the run is the violating spans whose
// starts lie in [First, Last] (no span start in between that does not
// violate).
type Reach struct {
	// Kind is the violations' kind.
	Kind string `json:"kind"`
	// Key is the limiter (or lock) concerned.
	Key string `json:"key"`
	// Since is when the state a fault could have lost was made: the
	// invocation of the key's first grant (rate limits), of the latest
	// proof of presence by the violation, else the acquisition, of the
	// leases or permits it needs gone (overlaps, owner conflicts, wrong
	// denials, over capacity; see below), of the write whose loss would
	// explain a latch answer (the
	// generation's creation, the replacing reset, the count-downs, the
	// count-down that reached zero), of a leftover entry's last write
	// (leaks). A fault can only have lost state that existed when it struck.
	// State proven on the server after it (an ok renewal, a verify true, a
	// release "released": no script of theirs creates an entry) survived it
	// or was written after it (issue 30, rule 1).
	Since int64 `json:"since_ns"`
	// First and Last are the earliest and latest start of a violating span.
	First int64 `json:"first_ns"`
	Last  int64 `json:"last_ns"`
	// Len is the longest a span can be: a violating span starting at a is
	// complete by a+Len (history.Never: unbounded).
	Len int64 `json:"len_ns"`
	// Horizon is how long after the loss ended (Effect.Until: the effect
	// observed, or an ongoing loss's end) a violating span can still start
	// because of it (history.Never: unbounded).
	Horizon int64 `json:"horizon_ns"`
	// Fresh: a violating span that starts after a loss that is not ongoing
	// ended (Effect.Until of an effect that is not Effect.Ongoing) holds
	// only operations that read state written after the loss, which the
	// algorithm alone decided: no such effect explains it, whatever the
	// Horizon (rate limits). Ongoing effects keep the Horizon.
	Fresh bool `json:"fresh,omitempty"`
}

// String is the verdict line: "FAIL exclusion: summary".
func (r *Result) String() string {
	return fmt.Sprintf("%-7s %s: %s", r.Verdict, r.Checker, r.Summary)
}

// Options tune the checkers. The zero value is usable: zero fields take the
// defaults documented on each.
type Options struct {
	// Drift is the clock drift allowance: holders' validity windows and the
	// spans of rate-limit bounds are shortened by it, so that a server clock
	// running up to Drift fast over one window is tolerated. Default 0.
	Drift time.Duration `json:"drift_ns,omitempty"`
	// Timeout bounds each porcupine search; a search that runs out of time
	// gives UNKNOWN, never PASS. Default 10s.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Capacity, when positive, overrides the semaphore capacity recorded in
	// the history (the capacity field of sem_acquire operations).
	Capacity int64 `json:"capacity,omitempty"`
	// WakeBound is how soon after the lock became free a waiter must acquire
	// it (RTT + wake slack). Default 1s.
	WakeBound time.Duration `json:"wake_bound_ns,omitempty"`
	// LostNotifications tells the liveness checker that release
	// notifications may have been lost (the nemesis cut them): a waiter that
	// was already sleeping then only has to acquire by the released lease's
	// expiry (+ Drift) + WakeBound.
	LostNotifications bool `json:"lost_notifications,omitempty"`
	// DenseTokens makes the token-order model stricter: tokens come from one
	// counter per key that increments exactly once per granted acquisition,
	// so each ok token must be exactly one more than the previous one, except
	// for increments consumed by info acquisitions. Off by default (tokens
	// only have to increase; gaps are allowed).
	DenseTokens bool `json:"dense_tokens,omitempty"`
	// RecoverBound is how long after a heal the system may take to answer
	// again before the progress checker judges it. Default 2s.
	RecoverBound time.Duration `json:"recover_bound_ns,omitempty"`
	// MinProgress is the share of operations of each kind that must be
	// answered in a healthy period. Default 0.5.
	MinProgress float64 `json:"min_progress,omitempty"`
	// MaxEvidence is how many violations each Result details. Default 10.
	MaxEvidence int `json:"max_evidence,omitempty"`
	// UncertainRenewalReleases says the implementation, after a renewal
	// whose outcome is unknown, fences it and releases the lease
	// owner-checked in the background, and answers "not held" from then on
	// without asking the server (prim does; the peer libraries do not): the
	// lease-protocol and exclusion checkers then end the owner's lease at
	// that renewal, since the history does not record the clean-up.
	UncertainRenewalReleases bool `json:"uncertain_renewal_releases,omitempty"`
	// VisualizeLimit is the largest number of operations of a porcupine
	// partition that is rendered as HTML. Default 5000.
	VisualizeLimit int `json:"visualize_limit,omitempty"`
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.WakeBound <= 0 {
		o.WakeBound = time.Second
	}
	if o.RecoverBound <= 0 {
		o.RecoverBound = 2 * time.Second
	}
	if o.MinProgress <= 0 {
		o.MinProgress = 0.5
	}
	if o.MaxEvidence <= 0 {
		o.MaxEvidence = 10
	}
	if o.VisualizeLimit <= 0 {
		o.VisualizeLimit = 5000
	}
	if o.Drift < 0 {
		o.Drift = 0
	}
	return o
}

// The kinds of violation the checkers report (Evidence.Kind, Result.Kinds).
const (
	KindOverlap         = "overlap"          // exclusion: two holders' validity windows overlap
	KindOverCapacity    = "over-capacity"    // exclusion: more permits held than the capacity
	KindTokenReused     = "token-reused"     // fenced-resource: one token accepted from two owners
	KindTokenNotGiven   = "token-not-given"  // fenced-resource: a write with a token its process was never given
	KindStaleWrite      = "stale-write"      // fenced-resource: a write with a lower token accepted after a higher one
	KindBadToken        = "bad-token"        // a non-positive token granted or accepted
	KindWrongReject     = "wrongly-rejected" // fenced-resource: a current write refused
	KindTokenDuplicate  = "token-duplicate"  // token-order: one token granted twice
	KindTokenRegressed  = "token-regressed"  // token-order: a smaller token granted after a larger one
	KindNotLinearizable = "not-linearizable" // a porcupine model found no linearization
	KindStuckWaiter     = "stuck-waiter"     // liveness: a waiter did not acquire a free lock in time
	KindLeak            = "leak"             // leaks: a key outlived every TTL
	KindLatch           = "latch"            // latch: a wait or count-down answered wrongly
	KindLatchUnderflow  = "latch-underflow"  // latch: a count-down went below zero (no lost write explains it)
	KindOverLimit       = "over-limit"       // rate limits: more granted in a span than the bound
	KindWronglyLimited  = "wrongly-limited"  // rate limits: a request denied while the algorithm's own state had to allow it
	KindOwnerConflict   = "owner-conflict"   // lease-protocol: an owner granted, renewed, released or verified while another certainly held the lock
	KindAfterEnd        = "after-end"        // lease-protocol: an owner's lease answered as held after it certainly ended (released twice, renewed after expiry)
	KindWronglyDenied   = "wrongly-denied"   // lease-protocol: "not held" answered inside the owner's own certain span
	KindNoProgress      = "no-progress"      // progress: a kind of operation mostly unanswered in a healthy period
	KindSeqOrder        = "seq-order"        // fenced-resource: the resource's seq order contradicts real time
	KindPhantomOwner    = "phantom-owner"    // no-phantom-owner: the lease held the owner of an acquisition that answered fail
	KindUnknownOwner    = "unknown-owner"    // no-phantom-owner: the lease held an owner no acquisition sent
)

// collector accumulates violations for a Result.
type collector struct {
	max      int
	n        int
	kinds    map[string]int
	earliest map[string]int64
	evidence []Evidence
	unknown  []Evidence
	reaches  []Reach
}

func newCollector(o Options) *collector {
	return &collector{max: o.MaxEvidence, kinds: map[string]int{}, earliest: map[string]int64{}}
}

// fail records a violation of a kind, complete at the latest completion
// among ops.
func (c *collector) fail(kind, key, msg string, ops ...*history.Operation) {
	c.failAt(kind, key, completedAt(ops), msg, ops...)
}

// failAt is fail for a violation complete at t (the history's clock), which
// may be earlier than the latest completion among ops (an overlap is
// complete when the later window opens, whenever the releases that ended the
// windows returned).
func (c *collector) failAt(kind, key string, t int64, msg string, ops ...*history.Operation) {
	if !c.full(kind) {
		e := evidence(key, msg, ops)
		e.Kind = kind
		c.evidence = append(c.evidence, e)
	}
	c.skipAt(kind, t)
}

// full reports whether the evidence of a kind is complete: further violations
// of it are only counted (call skip instead of formatting a message).
func (c *collector) full(kind string) bool { return c.kinds[kind] >= c.max }

// skip counts a violation without evidence, complete at the latest
// completion among ops.
func (c *collector) skip(kind string, ops ...*history.Operation) { c.skipAt(kind, completedAt(ops)) }

// skipAt counts a violation complete at t without evidence.
func (c *collector) skipAt(kind string, t int64) {
	c.n++
	c.kinds[kind]++
	if e, ok := c.earliest[kind]; !ok || t < e {
		c.earliest[kind] = t
	}
}

// completedAt is when a violation among ops was complete: the latest
// completion (Never when no operation is named: when it happened is
// unknown).
func completedAt(ops []*history.Operation) int64 {
	end := history.Never
	if len(ops) > 0 {
		end = 0
	}
	for _, o := range ops {
		if o != nil && o.Return > end {
			end = o.Return
		}
	}
	return end
}

// undecided records a reason for UNKNOWN.
func (c *collector) undecided(key, msg string, ops ...*history.Operation) {
	if len(c.unknown) < c.max {
		c.unknown = append(c.unknown, evidence(key, msg, ops))
	}
}

func evidence(key, msg string, ops []*history.Operation) Evidence {
	e := Evidence{Key: key, Msg: msg}
	for _, o := range ops {
		if o != nil {
			e.Ops = append(e.Ops, *o)
		}
	}
	return e
}

// result builds the Result: FAIL if anything failed, else UNKNOWN if anything
// was undecided, else PASS with the pass summary.
func (c *collector) result(name string, ops int, pass string) Result {
	r := Result{Checker: name, Ops: ops, Violations: c.n}
	switch {
	case c.n > 0:
		r.Verdict = Fail
		r.Evidence = c.evidence
		r.Kinds, r.Earliest, r.Reaches = c.kinds, c.earliest, c.reaches
		r.Summary = fmt.Sprintf("%s; first: %s", Plural(c.n, "violation"), firstLine(c.evidence[0]))
	case len(c.unknown) > 0:
		r.Verdict = Unknown
		r.Evidence = c.unknown
		r.Summary = "undecided: " + firstLine(c.unknown[0])
	default:
		r.Verdict = Pass
		r.Summary = pass
	}
	return r
}

func firstLine(e Evidence) string {
	if e.Key != "" {
		return fmt.Sprintf("key %q: %s", e.Key, e.Msg)
	}
	return e.Msg
}

// ms converts milliseconds to nanoseconds, saturating.
func ms(v int64) int64 {
	const max = int64(^uint64(0)>>1) / 1e6
	if v > max {
		return history.Never
	}
	if v < -max {
		return -history.Never
	}
	return v * 1e6
}

// addSat adds without overflowing past Never.
func addSat(a, b int64) int64 {
	if a == history.Never || b == history.Never {
		return history.Never
	}
	s := a + b
	if b > 0 && s < a {
		return history.Never
	}
	if b < 0 && s > a {
		return -history.Never
	}
	return s
}

// fmtT formats a history time (ns from the run's start) for messages, in
// seconds as the report's timeline axis gives them, exactly: "3.034208s",
// "2.577644073s" ("1.000s": three decimals at least), so that two times a
// message contrasts never print the same.
func fmtT(t int64) string {
	if t == history.Never {
		return "never"
	}
	sign := ""
	if t < 0 {
		sign, t = "-", -t
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", t%1e9), "0")
	for len(frac) < 3 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%ss", sign, t/1e9, frac)
}

// lockID names one lock: a key, or a hash key and field.
type lockID struct{ key, field string }

func idOf(o *history.Operation) lockID { return lockID{o.Key, o.Field} }

// lockIDs numbers locks densely in order of first appearance, for fast
// sorting and maps.
type lockIDs map[lockID]int32

// of returns the number of op's lock, numbering it if new.
func (ids lockIDs) of(op *history.Operation) int32 {
	id := idOf(op)
	k, ok := ids[id]
	if !ok {
		k = int32(len(ids))
		ids[id] = k
	}
	return k
}

func (id lockID) String() string {
	if id.field == "" {
		return id.key
	}
	return id.key + "#" + id.field
}

// Plural is a count with its noun in the number it takes: "1 key", "2 keys",
// "3 entries".
func Plural[N ~int | ~int64](n N, word string) string {
	count := strconv.FormatInt(int64(n), 10)
	switch {
	case n == 1:
		return count + " " + word
	case strings.HasSuffix(word, "y") && !strings.HasSuffix(word, "ey"):
		return count + " " + word[:len(word)-1] + "ies"
	}
	return count + " " + word + "s"
}
