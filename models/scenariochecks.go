package models

import (
	"fmt"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// The checks below belong to particular scenarios (redlock/*,
// redlock/pause-client, latch/lost-notifications, semaphore/no-expiry-crash,
// hash-lease/old-server). They were once run by the scenarios themselves,
// and an offline check could only repeat the verdict the run recorded in
// the history's header. Every one now judges the history — plus, for the
// two that need the servers' state after the run, the reads the run
// recorded in the header as data (history.HeaderProperty.Reads) — so that
// coordtorture and fencecheck decide them the same way (issue 30, rule 8).
// Without the data a check needs, it is UNKNOWN and names what it lacks.

// Violation kinds of the scenario checks.
const (
	KindValidity      = "validity"       // redlock-validity: an acquisition claimed more validity than ttl − elapsed − drift allowance
	KindPermitLost    = "permit-lost"    // no-expiry-kept: a crashed holder's permit without expiry was gone after the run
	KindPermitExpires = "permit-expires" // no-expiry-kept: a permit taken without expiry had a deadline on the server
	KindNotRefused    = "not-refused"    // refused-untouched: an acquisition on a server without the feature was not refused as it must be
	KindTouched       = "touched"        // refused-untouched: the refused key exists on a server after the run
)

// RedlockElapsedSlack is what redlock-validity allows an acquisition's
// claimed validity beyond ttl − (its return − its invocation) − the drift
// allowance it declared: the history's stamps bracket the implementation's
// own clock readings (its start after the invocation, its claim before the
// completion is recorded), and the scheduling between them on a loaded
// machine is given this much. An implementation that leaves out the elapsed
// time exceeds the bound by the acquisition's round trip less this: 40ms
// and more on redlock/latency.
const RedlockElapsedSlack = 40 * time.Millisecond

// CheckRedlockValidity holds each Redlock acquisition's claimed validity to
// what the algorithm allows, from the history alone: on an ok acquire (or
// acquire_wait) the claimed validity (count, in µs), the lease's ttl
// (ttl_ms), the drift allowance the implementation declared (drift_us, in
// µs; absent: none declared, held to zero), the invocation and the
// completion. A claim is FAIL (validity) when it exceeds ttl − drift
// allowance, or ttl − drift allowance − (completion − invocation) +
// RedlockElapsedSlack: a lease's validity is ttl − elapsed − drift, so an
// implementation that forgets the drift claims more than the first bound
// on every acquisition, and one that forgets the elapsed time more than the
// second where the round trip to the nodes is long (redlock/latency). An ok
// acquisition without a claim (count 0) is not a Redlock claim and is not
// counted; none at all is UNKNOWN (nothing to check).
func CheckRedlockValidity(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	n := 0
	var drifts []string
	seen := map[[2]int64]bool{}
	for k := range h.Ops {
		op := &h.Ops[k]
		if !isTokenAcquire(op.F) || op.Type != history.OK || op.Count == 0 {
			continue
		}
		n++
		ttl := time.Duration(op.TTLMs) * time.Millisecond
		drift := time.Duration(op.DriftUs) * time.Microsecond
		claimed := time.Duration(op.Count) * time.Microsecond
		most := ttl - drift
		took := time.Duration(op.Return - op.Call())
		if key := [2]int64{op.TTLMs, op.DriftUs}; !seen[key] && len(drifts) < 3 {
			seen[key] = true
			drifts = append(drifts, fmt.Sprintf("%v on a %v lease", drift, ttl))
		}
		switch {
		case claimed > most:
			c.fail(KindValidity, op.Key, fmt.Sprintf("acquisition claimed %v of validity on a %v lease: more than ttl − drift allowance (%v, the allowance declared %v)",
				claimed, ttl, most, drift), op)
		case claimed > most-took+RedlockElapsedSlack:
			c.fail(KindValidity, op.Key, fmt.Sprintf("acquisition claimed %v of validity on a %v lease that took %v to acquire: more than ttl − elapsed − drift allowance (%v, the allowance declared %v, %v allowed for scheduling)",
				claimed, ttl, took.Round(time.Microsecond), (most-took).Round(time.Microsecond), drift, RedlockElapsedSlack), op)
		}
	}
	if n == 0 {
		c.undecided("", "no acquisition claimed a validity (count on an ok acquire): nothing to check")
	}
	r := c.result("redlock-validity", n, fmt.Sprintf("%s claimed at most ttl − the time it took − the drift allowance it declared (%s; %v allowed for scheduling)",
		Plural(n, "acquisition"), strings.Join(drifts, ", "), RedlockElapsedSlack))
	if r.Verdict == Fail {
		r.Summary = fmt.Sprintf("%s of %d; first: %s", Plural(r.Violations, "acquisition claimed too much validity"), n, r.Evidence[0].Msg)
	}
	r.Elapsed = time.Since(start)
	return r
}

// CheckStaleWriteShown is redlock/pause-client's demonstration, judged on
// the history by the fenced-resource oracle: a paused holder's write
// reaching the unfenced resource after a later holder's, and accepted
// (Redlock hands out no token to refuse it), is the reason to fence, shown —
// PASS, listed in the summary. No stale write is UNKNOWN (no pause caught a
// write: nothing shown); any other violation of the resource is FAIL.
func CheckStaleWriteShown(h *history.History, o Options) Result {
	r := CheckFencedResource(h, o)
	r.Checker = "stale-write-shown"
	switch r.Verdict {
	case Pass:
		r.Verdict, r.Summary = Unknown, "no stale write reached the resource: no pause caught a write, nothing shown ("+r.Summary+")"
	case Fail:
		if len(r.Kinds) == 1 && r.Kinds[KindStaleWrite] > 0 {
			first := ""
			if len(r.Evidence) > 0 {
				first = "; first: " + r.Evidence[0].Msg
			}
			r = Result{Checker: r.Checker, Verdict: Pass, Ops: r.Ops, Elapsed: r.Elapsed,
				Summary: fmt.Sprintf("shown: the unfenced resource accepted %s after a later holder's (Redlock gives no fencing token to refuse them)%s",
					Plural(r.Kinds[KindStaleWrite], "stale write"), first)}
		}
	}
	return r
}

// CheckCompletionCutOff is latch/lost-notifications' proof that the fault
// did what the scenario is about: a count-down that answered 0 (the latch
// completed) inside a proven cut — from the completion of a nemesis fault
// to the invocation of the heal that found the waiters' tracking
// connections closed by it (its value says "closed by the cut") — lost its
// notification. PASS when one did; UNKNOWN when no cut was proven or no
// count reached zero inside one (nothing checked).
func CheckCompletionCutOff(h *history.History, _ Options) Result {
	start := time.Now()
	res := Result{Checker: "completion-cut-off"}
	type span struct{ from, to int64 }
	var cuts []span
	var open *history.Operation
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F != history.FNemesis {
			continue
		}
		switch op.Key {
		case NemesisFault:
			if op.Type == history.OK {
				open = op
			}
		case NemesisHeal:
			if open != nil && op.Type == history.OK && strings.Contains(op.Value, "closed by the cut") {
				cuts = append(cuts, span{open.Return, op.T})
			}
			open = nil
		}
	}
	zeros := 0
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F != history.FLatchCountDown || op.Type != history.OK || op.Count != 0 {
			continue
		}
		for _, c := range cuts {
			if op.T > c.from && op.Return < c.to {
				zeros++
				break
			}
		}
	}
	res.Ops = zeros
	switch {
	case len(cuts) == 0:
		res.Verdict, res.Summary = Unknown, "no cut was proven (no heal found the waiters' tracking connections closed): nothing checked"
	case zeros == 0:
		res.Verdict = Unknown
		res.Summary = fmt.Sprintf("no count reached zero while the waiters were cut off (%s): no completion's notification was lost, nothing checked",
			Plural(len(cuts), "proven cut"))
	default:
		res.Verdict = Pass
		res.Summary = fmt.Sprintf("%s reached zero while the waiters were cut off (%s): those completions' notifications were lost",
			Plural(zeros, "count"), Plural(len(cuts), "proven cut"))
	}
	res.Elapsed = time.Since(start)
	return res
}

// CrashedPermits are the ok sem_acquire (or sem_acquire_wait) operations
// taken without expiry (ttl_ms 0) whose owner never invoked a release of
// that semaphore: a crashed holder's, which only a release would end.
func CrashedPermits(h *history.History) []*history.Operation {
	released := map[[2]string]bool{}
	for k := range h.Ops {
		if op := &h.Ops[k]; op.F == history.FRelease {
			released[[2]string{op.Key, op.Owner}] = true
		}
	}
	var out []*history.Operation
	for k := range h.Ops {
		op := &h.Ops[k]
		if (op.F == history.FSemAcquire || op.F == history.FSemAcquireWait) && op.Type == history.OK && op.TTLMs == 0 && !released[[2]string{op.Key, op.Owner}] {
			out = append(out, op)
		}
	}
	return out
}

// PermitKept is the reply a no-expiry-kept read records for a permit held
// without a deadline (its score); PermitAbsent, for one that is gone.
const (
	PermitKept   = "+Inf"
	PermitAbsent = "absent"
)

// headerReads returns the server reads the history's header records for
// the checker, and whether it records any.
func headerReads(h *history.History, checker string) ([]history.ServerRead, bool) {
	if h.Header == nil {
		return nil, false
	}
	for _, hp := range h.Header.Properties {
		if hp.Checker == checker && len(hp.Reads) > 0 {
			return hp.Reads, true
		}
	}
	return nil, false
}

// CheckNoExpiryKept is semaphore/no-expiry-crash's check that every permit
// a crashed holder took without expiry (CrashedPermits) is still held after
// the run, without a deadline: the design's promise (only a release ends
// it), and the proof that the crash happened. It judges the history and
// what the run read from the server after it, recorded in the header as
// data (reads: for each crashed permit the key, the owner as member, and
// the reply: PermitKept, PermitAbsent or the deadline the server had). A
// permit gone is FAIL (permit-lost), one with a deadline FAIL
// (permit-expires). No crashed holder is UNKNOWN (the crash did not happen,
// nothing checked); so is a history without the server's reads (a history
// without its header: what is left on the server cannot be recomputed) or
// with a read that failed.
func CheckNoExpiryKept(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	crashed := CrashedPermits(h)
	var kept []string
	if len(crashed) == 0 {
		c.undecided("", "no holder crashed holding a permit without expiry (none was acquired): nothing checked")
	} else if reads, ok := headerReads(h, "no-expiry-kept"); !ok {
		c.undecided("", fmt.Sprintf("%s crashed holding a permit without expiry, but the history lacks the server's state after the run (the header's reads for no-expiry-kept): only the run could read it",
			Plural(len(crashed), "holder")), crashed...)
	} else {
		for _, r := range reads {
			if r.Member == "" && r.Err != "" {
				c.undecided(r.Key, "the run could not read the server: "+r.Err)
			}
		}
		for _, op := range crashed {
			var read *history.ServerRead
			for k := range reads {
				if reads[k].Key == op.Key && reads[k].Member == op.Owner {
					read = &reads[k]
				}
			}
			switch {
			case read == nil:
				c.undecided(op.Key, fmt.Sprintf("process %d's permit %s: the run recorded no read of it", op.Process, op.Owner), op)
			case read.Err != "":
				c.undecided(op.Key, fmt.Sprintf("process %d's permit %s: the run could not read it: %s", op.Process, op.Owner, read.Err), op)
			case read.Reply == PermitAbsent:
				c.fail(KindPermitLost, op.Key, fmt.Sprintf("process %d's permit %s, taken without expiry and never released (it crashed), was gone from the server after the run",
					op.Process, op.Owner), op)
			case read.Reply != PermitKept:
				c.fail(KindPermitExpires, op.Key, fmt.Sprintf("process %d's permit %s, taken without expiry, had the deadline %s on the server after the run",
					op.Process, op.Owner, read.Reply), op)
			default:
				kept = append(kept, fmt.Sprintf("process %d's %s", op.Process, op.Owner))
			}
		}
	}
	r := c.result("no-expiry-kept", len(crashed), fmt.Sprintf("%s crashed holding a permit without expiry, still held on the server after the run (kept by design, not a leak): %s",
		Plural(len(crashed), "holder"), strings.Join(kept, ", ")))
	r.Elapsed = time.Since(start)
	return r
}

// CheckRefusedUntouched is hash-lease/old-server's check, on a server
// without hash-field expiry: every acquire (or acquire_wait) of the history
// was refused (fail) with an error naming the missing feature ("hash-field
// expiration") and the versions that have it ("7.4"), else FAIL
// (not-refused; no acquisition at all is one too); and the hash was never
// created: the run's reads of it on every node after the workload
// (recorded in the header as data: the key, the node, and EXISTS's reply)
// all answered "0", else FAIL (touched). A history without the reads (no
// header) or with a read that failed is UNKNOWN unless its acquisitions
// already FAIL it.
func CheckRefusedUntouched(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	n := 0
	var key string
	var first *history.Operation // the first acquisition, shown beside the hash found
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F != history.FAcquire && op.F != history.FAcquireWait {
			continue
		}
		n++
		key = op.Key
		if first == nil {
			first = op
		}
		switch {
		case op.Type != history.Fail:
			c.fail(KindNotRefused, op.Key, fmt.Sprintf("acquisition was %s on a server without hash-field expiry", op.Type), op)
		case !strings.Contains(op.Err, "hash-field expiration") || !strings.Contains(op.Err, "7.4"):
			c.fail(KindNotRefused, op.Key, fmt.Sprintf("refusal does not name the missing feature and its versions: %q", op.Err), op)
		}
	}
	if n == 0 {
		c.failAt(KindNotRefused, "", history.Never, "no acquisition was attempted")
	}
	reads, ok := headerReads(h, "refused-untouched")
	if !ok {
		c.undecided(key, "the history lacks the servers' state after the run (the header's reads for refused-untouched): whether the hash was written only the run could read")
	}
	for _, r := range reads {
		switch {
		case r.Err != "":
			c.undecided(r.Key, fmt.Sprintf("%s: the run could not read %s: %s", r.Node, r.Key, r.Err))
		case r.Reply != "0":
			c.failAt(KindTouched, r.Key, history.Never, fmt.Sprintf("%s: the hash %s exists after the refusals (EXISTS %s)", r.Node, r.Key, r.Reply), first)
		}
	}
	r := c.result("refused-untouched", n, fmt.Sprintf("%s refused before writing, each naming hash-field expiration and the versions that have it; the hash was never created (%s)",
		Plural(n, "acquisition"), Plural(len(reads), "node")+" read"))
	r.Elapsed = time.Since(start)
	return r
}
