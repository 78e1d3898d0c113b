package models

import (
	"fmt"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// CheckLeaks checks the final-state records (ok leak_scan operations: what
// the harness found on the server after the workload stopped and every TTL
// elapsed; count is the number of keys or entries found, value lists them).
// Anything found is a leak (FAIL) when the scan was invoked after every
// lease, lock and permit of the history could have expired (latest possible
// expiry + Drift). When a scan found something earlier than that, or while
// an entry without a TTL was released with an unknown outcome, or after an acquisition or
// renewal of unknown outcome that never completed, the verdict is UNKNOWN.
// A history without a completed scan is UNKNOWN too: nothing was checked,
// which is never a PASS. An entry taken without expiry whose holder never
// invoked a release (it crashed) is kept by design: the scan does not list
// it and it sets no expiry here.
func CheckLeaks(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	var scans []*history.Operation
	var failed *history.Operation
	for k := range h.Ops {
		if op := &h.Ops[k]; op.F == history.FLeakScan && op.Type == history.OK {
			scans = append(scans, op)
		} else if op.F == history.FLeakScan && failed == nil {
			failed = op
		}
	}
	if len(scans) == 0 {
		if failed != nil {
			c.undecided(failed.Key, fmt.Sprintf("the final-state scan did not complete (%s): %s", failed.Type, failed.Err), failed)
		} else {
			c.undecided("", "no leak_scan record: nothing checked")
		}
		r := c.result("leaks", 0, "")
		r.Elapsed = time.Since(start)
		return r
	}
	// The latest instant anything of the history may still exist.
	hs := buildHolds(h, int64(o.Drift), func(mode) bool { return true }, o.UncertainRenewalReleases)
	latest, latestOp := int64(0), (*history.Operation)(nil)
	consider := func(t int64, op *history.Operation) {
		if t > latest {
			latest, latestOp = t, op
		}
	}
	for k := range hs.holds {
		hd := &hs.holds[k]
		if hd.superseded {
			continue
		}
		if hd.ttl == 0 && hd.relInv == history.Never && !hd.released {
			// Taken without expiry and no release ever invoked: a crashed
			// holder's, kept by design (only a release ends it); the scan
			// does not list such entries (history/FORMAT.md, leak_scan).
			continue
		}
		if hd.released {
			consider(hd.freedAt, &h.Ops[hd.acq])
		} else {
			consider(addSat(hd.expiry, int64(o.Drift)), &h.Ops[hd.acq])
		}
	}
	for _, m := range hs.maybe {
		consider(addSat(m.expiry, int64(o.Drift)), &h.Ops[m.op])
	}
	clean := 0
	for _, s := range scans {
		if s.Count == 0 && s.Value == "" {
			clean++
			continue
		}
		found := Plural(s.Count, "entry")
		if s.Value != "" {
			found = fmt.Sprintf("%s: %s", Plural(s.Count, "entry"), s.Value)
		}
		switch {
		case latest == history.Never:
			c.undecided(s.Key, fmt.Sprintf("scan found %s, but an entry of the history has no expiry (never released, no TTL, or of unknown outcome)", found), latestOp, s)
		case s.T < latest:
			c.undecided(s.Key, fmt.Sprintf("scan at %s found %s, before every TTL had elapsed (%s)", fmtT(s.T), found, fmtT(latest)), latestOp, s)
		default:
			c.fail(KindLeak, s.Key, fmt.Sprintf("leak: scan at %s, after every TTL had elapsed (%s), found %s", fmtT(s.T), fmtT(latest), found), s)
			// Where each entry's state was last written, for Judge: a
			// lost write (a failover, a restart) can explain an entry
			// only if its last write (the delete or release that should
			// have removed it, or what made it) came before the loss
			// ended.
			ln := history.Never
			if s.Return != history.Never {
				ln = s.Return - s.T
			}
			for _, line := range strings.Split(s.Value, "\n") {
				if line == "" {
					continue
				}
				c.reaches = append(c.reaches, Reach{Kind: KindLeak, Key: s.Key, Since: lastWriteOf(h, line), First: s.T, Last: s.T, Len: ln, Horizon: history.Never})
			}
		}
	}
	r := c.result("leaks", len(scans), Plural(clean, "final-state scan")+": nothing left behind")
	r.Elapsed = time.Since(start)
	return r
}

// leakWrites are the operations that make or remove a lease, permit or
// latch entry (count-downs only change one).
var leakWrites = map[string]bool{
	history.FAcquire: true, history.FAcquireWait: true, history.FSemAcquire: true, history.FAcquireRead: true,
	history.FAcquireWrite: true, history.FRenew: true, history.FRelease: true, history.FLatchCreate: true,
	history.FLatchReset: true, history.FLatchDelete: true,
}

// lastWriteOf is the invocation of the latest write that made or removed
// the entry a leak scan's line names ("node: key [member …]": the key, and a
// member that is an owner, when the history has operations of that owner on
// the key), or 0 when the history has none (it cannot say when the entry
// was made). Writes that certainly did nothing (fail) do not count.
func lastWriteOf(h *history.History, line string) int64 {
	if _, rest, ok := strings.Cut(line, ": "); ok {
		line = rest
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0
	}
	key, member := f[0], ""
	if len(f) > 1 {
		member = f[1]
	}
	var last, lastOwned int64
	for k := range h.Ops {
		op := &h.Ops[k]
		if !leakWrites[op.F] || op.Type == history.Fail || !namesKey(key, op.Key) {
			continue
		}
		last = max(last, op.T)
		if member != "" && op.Owner == member {
			lastOwned = max(lastOwned, op.T)
		}
	}
	if lastOwned > 0 {
		return lastOwned
	}
	return last
}

// namesKey reports whether the server key a scan listed is the history's
// key k: the same, or k behind a prefix ending in ':' (a run's prefix on an
// external deployment), looking inside a lock's hash tag ("{…k}:lease").
func namesKey(server, k string) bool {
	if k == "" {
		return false
	}
	s := server
	if i := strings.IndexByte(s, '{'); i >= 0 {
		if j := strings.IndexByte(s[i:], '}'); j > 1 {
			s = s[i+1 : i+j]
		}
	}
	if s == k {
		return true
	}
	p, ok := strings.CutSuffix(s, k)
	return ok && strings.HasSuffix(p, ":")
}
