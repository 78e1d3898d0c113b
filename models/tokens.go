package models

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/coordtorture/coordtorture/history"
)

// isTokenAcquire reports whether f is an acquisition that grants fencing
// tokens (exclusive locks; their ok completions carry token).
func isTokenAcquire(f string) bool { return f == history.FAcquire || f == history.FAcquireWait }

// CheckTokenOrder checks fencing tokens, per key: every ok acquisition's
// token is positive, unique, and greater than the token of every
// acquisition that completed before it was invoked.
//
// A direct check runs first (O(n log n): sort by token for uniqueness, sort
// by completion with a running maximum for real-time order) and gives the
// evidence. Then each key's acquisitions are checked against a monotonic
// counter model, fail acquisitions dropped, info ones given a return at the
// end of the history and an output the model accepts in any state (they may
// or may not have consumed a token). With Options.DenseTokens the model is a
// counter incremented exactly once per grant, so tokens must be consecutive
// except where info acquisitions may have consumed one.
//
// The model check is a sweep (tokenSweep, O(n log n)) that decides exactly
// what porcupine decides on these models. Porcupine runs too, partitioned
// by key, on the keys with at most Options.VisualizeLimit acquisitions: it
// gives the verdict there (as the sweep's cross-check) and draws the
// visualization. On larger keys it would add no power, only time (its
// search is quadratic on one key), and nothing could be drawn: the sweep
// alone decides them. A porcupine timeout gives UNKNOWN, never PASS.
func CheckTokenOrder(h *history.History, o Options) Result {
	start := time.Now()
	o = o.withDefaults()
	c := newCollector(o)
	byKey := make(map[string][]int)
	n := 0
	for k := range h.Ops {
		op := &h.Ops[k]
		if !isTokenAcquire(op.F) || op.Type == history.Fail {
			continue
		}
		if op.Type == history.OK && op.Token == 0 {
			continue // a lock without fencing tokens
		}
		byKey[op.Key] = append(byKey[op.Key], k)
		n++
	}
	granted := false
	for k := range h.Ops {
		if op := &h.Ops[k]; isTokenAcquire(op.F) && op.Type == history.OK && op.Token != 0 {
			granted = true
			break
		}
	}
	if !granted {
		// Info acquisitions alone check nothing: no token was seen.
		return Result{Checker: "token-order", Verdict: Unknown, Elapsed: time.Since(start),
			Summary: "nothing to check: no acquisition answered with a fencing token"}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var failing []string
	for _, key := range keys {
		before := c.n
		directTokenCheck(h, key, byKey[key], c)
		if c.n > before {
			failing = append(failing, key)
		}
	}
	var r Result
	if c.n > 0 {
		// The verdict is decided; porcupine only draws the first failing key.
		r = c.result("token-order", n, "")
		if size := len(byKey[failing[0]]); size <= o.VisualizeLimit {
			_, viz, note := porcupineTokens(h, byKey, failing[:1], o)
			r.Visualization = viz
			if note != "" {
				r.Summary += " (" + note + ")"
			}
		} else {
			var groups [][]*history.Operation
			for k := range c.evidence {
				if e := &c.evidence[k]; e.Key == failing[0] {
					var around []*history.Operation
					for n := range e.Ops {
						around = append(around, &e.Ops[n])
					}
					groups = append(groups, around)
				}
			}
			viz, note := porcupineWindow(h, failing[0], byKey[failing[0]], groups, o)
			r.Visualization = viz
			r.Summary += " (" + note + ")"
		}
		r.Elapsed = time.Since(start)
		return r
	}
	// Small keys: porcupine decides (and draws); the sweep cross-checks.
	// Large keys: the sweep decides.
	var small []string
	swept := make(map[string]*tokenViolation)
	var windowViz []byte // of the first large key the sweep fails
	var windowNote string
	for _, key := range keys {
		v := tokenSweep(h, byKey[key], o.DenseTokens)
		if len(byKey[key]) <= o.VisualizeLimit {
			small = append(small, key)
			swept[key] = v
			continue
		}
		if v != nil {
			c.fail(KindNotLinearizable, key, "not linearizable with the "+modelName(o)+": "+v.msg, v.ops...)
			if windowViz == nil && windowNote == "" {
				windowViz, windowNote = porcupineWindow(h, key, byKey[key], [][]*history.Operation{v.ops}, o)
			}
		}
	}
	viz := windowViz
	var notes []string
	if windowNote != "" {
		notes = append(notes, windowNote)
	}
	porcupineVerdict := ""
	if len(small) > 0 {
		res, pviz, note := porcupineTokens(h, byKey, small, o)
		if pviz != nil {
			viz = pviz
		}
		if note != "" {
			notes = append(notes, note)
		}
		sweepFound := ""
		for _, key := range small {
			if v := swept[key]; v != nil && sweepFound == "" {
				sweepFound = fmt.Sprintf("key %q: %s", key, v.msg)
			}
		}
		switch res {
		case porcupine.Ok:
			porcupineVerdict = "porcupine: linearizable"
			if sweepFound != "" {
				c.undecided("", "porcupine finds the acquisitions linearizable but the sweep does not ("+sweepFound+"): a checker bug")
			}
		case porcupine.Illegal, porcupine.Unknown:
			// The violations are the sweep's, with their operations and keys
			// (so each has a time to judge against a fault); porcupine's
			// verdict is only checked against it.
			for _, key := range small {
				if v := swept[key]; v != nil {
					c.fail(KindNotLinearizable, key, "not linearizable with the "+modelName(o)+": "+v.msg, v.ops...)
				}
			}
			switch {
			case res == porcupine.Illegal && sweepFound == "":
				c.fail(KindNotLinearizable, "", "porcupine: not linearizable with the "+modelName(o)+", though the sweep found no violation: a checker bug")
			case res == porcupine.Illegal:
				notes = append(notes, "porcupine agrees: not linearizable (see the visualization)")
			case sweepFound == "":
				c.undecided("", fmt.Sprintf("porcupine timed out after %v; the direct check found no violation", o.Timeout))
			default:
				notes = append(notes, fmt.Sprintf("porcupine timed out after %v; the sweep, exact on a counter, decides", o.Timeout))
			}
		}
	}
	if big := len(keys) - len(small); big > 0 {
		notes = append(notes, fmt.Sprintf("%s with more than %d acquisitions decided by the sweep alone", Plural(big, "key"), o.VisualizeLimit))
	}
	pass := fmt.Sprintf("%s on %s: tokens unique and increasing in real-time order", Plural(n, "acquisition"), Plural(len(keys), "key"))
	if porcupineVerdict != "" {
		pass += " (" + porcupineVerdict + ")"
	}
	r = c.result("token-order", n, pass)
	r.Visualization = viz
	for _, note := range notes {
		r.Summary += " (" + note + ")"
	}
	r.Elapsed = time.Since(start)
	return r
}

func modelName(o Options) string {
	if o.DenseTokens {
		return "dense counter model"
	}
	return "monotonic counter model"
}

// directTokenCheck checks one key's acquisitions (indices into h.Ops).
func directTokenCheck(h *history.History, key string, idx []int, c *collector) {
	oks := make([]int, 0, len(idx))
	for _, k := range idx {
		op := &h.Ops[k]
		if op.Type != history.OK {
			continue
		}
		if op.Token <= 0 {
			c.fail(KindBadToken, key, fmt.Sprintf("non-positive fencing token %d", op.Token), op)
			continue
		}
		oks = append(oks, k)
	}
	// Uniqueness.
	byToken := slices.Clone(oks)
	slices.SortFunc(byToken, func(a, b int) int {
		return cmp.Or(cmp.Compare(h.Ops[a].Token, h.Ops[b].Token), cmp.Compare(a, b))
	})
	for n := 1; n < len(byToken); n++ {
		a, b := &h.Ops[byToken[n-1]], &h.Ops[byToken[n]]
		if a.Token == b.Token {
			if c.full(KindTokenDuplicate) {
				c.skip(KindTokenDuplicate, a, b)
				continue
			}
			c.fail(KindTokenDuplicate, key, fmt.Sprintf("token %d granted twice", a.Token), a, b)
		}
	}
	// Real-time order: the largest token among acquisitions that returned
	// strictly before op was invoked must be smaller than op's.
	granted := newReturnedMax(h, oks)
	for _, k := range oks {
		op := &h.Ops[k]
		if prev := granted.before(op.T); prev != nil && prev.Token > op.Token {
			if c.full(KindTokenRegressed) {
				c.skip(KindTokenRegressed, prev, op)
				continue
			}
			c.fail(KindTokenRegressed, key, fmt.Sprintf("token %d granted after token %d: the acquisition returning %d completed at %s, before this one was invoked at %s",
				op.Token, prev.Token, prev.Token, fmtT(prev.Return), fmtT(op.T)), prev, op)
		}
	}
}

// tokenInput and tokenOutput are the porcupine operation values.
type tokenInput struct {
	key string
	op  int // index in History.Ops
}

type tokenOutput struct {
	token int64
	known bool // false: an info acquisition
}

// denseState is the state of the dense counter model: the counter is in
// [lo, hi] (several values are possible after info acquisitions), or not
// yet known (before the first ok acquisition).
type denseState struct {
	known  bool
	lo, hi int64
}

func tokenModel(h *history.History, o Options) porcupine.Model {
	m := porcupine.Model{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			return partitionByKey(ops)
		},
		DescribeOperation: func(in, out interface{}) string {
			i, r := in.(tokenInput), out.(tokenOutput)
			op := &h.Ops[i.op]
			if !r.known {
				return fmt.Sprintf("%s #%d → ? (%s)", op.F, op.I, op.Type)
			}
			return fmt.Sprintf("%s #%d → %d", op.F, op.I, r.token)
		},
	}
	if o.DenseTokens {
		m.Init = func() interface{} { return denseState{} }
		m.Step = func(state, in, out interface{}) (bool, interface{}) {
			s, r := state.(denseState), out.(tokenOutput)
			if !r.known {
				if s.known {
					s.hi++ // it may or may not have incremented the counter
				}
				return true, s
			}
			if !s.known || (r.token >= s.lo+1 && r.token <= s.hi+1) {
				return true, denseState{true, r.token, r.token}
			}
			return false, s
		}
		m.Hash = func(state interface{}) uint64 {
			s := state.(denseState)
			return uint64(s.lo)*0x9e3779b97f4a7c15 ^ uint64(s.hi)*0xbf58476d1ce4e5b9
		}
		m.DescribeState = func(state interface{}) string {
			s := state.(denseState)
			switch {
			case !s.known:
				return "counter unknown"
			case s.lo == s.hi:
				return fmt.Sprintf("counter = %d", s.lo)
			}
			return fmt.Sprintf("counter in [%d, %d]", s.lo, s.hi)
		}
	} else {
		m.Init = func() interface{} { return int64(0) }
		m.Step = func(state, in, out interface{}) (bool, interface{}) {
			s, r := state.(int64), out.(tokenOutput)
			if !r.known {
				return true, s // it may have consumed a token: no constraint
			}
			if r.token > s {
				return true, r.token
			}
			return false, s
		}
		m.Hash = func(state interface{}) uint64 { return uint64(state.(int64)) * 0x9e3779b97f4a7c15 }
		m.DescribeState = func(state interface{}) string { return fmt.Sprintf("largest token %d", state.(int64)) }
	}
	return m
}

// partitionByKey splits ops by key in first-appearance order.
func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	pos := make(map[string]int)
	var parts [][]porcupine.Operation
	for _, op := range ops {
		key := op.Input.(tokenInput).key
		p, ok := pos[key]
		if !ok {
			p = len(parts)
			pos[key] = p
			parts = append(parts, nil)
		}
		parts[p] = append(parts[p], op)
	}
	return parts
}

// tokenOperations are porcupine's operations for the acquisitions of keys:
// info ones return at the end of the history + 1, with an unknown output.
func tokenOperations(h *history.History, byKey map[string][]int, keys []string) []porcupine.Operation {
	end := h.End + 1
	clients := make(map[int]int)
	var ops []porcupine.Operation
	for _, key := range keys {
		for _, k := range byKey[key] {
			op := &h.Ops[k]
			cid, ok := clients[op.Process]
			if !ok {
				cid = len(clients)
				clients[op.Process] = cid
			}
			po := porcupine.Operation{ClientId: cid, Input: tokenInput{key, k}, Call: op.T, Return: op.Return,
				Output: tokenOutput{op.Token, true}}
			if op.Type != history.OK {
				po.Return, po.Output = end, tokenOutput{}
			}
			ops = append(ops, po)
		}
	}
	return ops
}

// porcupineTokens runs porcupine on the acquisitions of keys. It returns the
// result, the visualization when the result is not Ok (if small enough), and
// a note on what was or was not drawn.
func porcupineTokens(h *history.History, byKey map[string][]int, keys []string, o Options) (porcupine.CheckResult, []byte, string) {
	model := tokenModel(h, o)
	ops := tokenOperations(h, byKey, keys)
	var sizes []int
	for _, key := range keys {
		sizes = append(sizes, len(byKey[key]))
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, o.Timeout)
	if res == porcupine.Ok {
		return res, nil, ""
	}
	if len(ops) <= o.VisualizeLimit {
		return res, visualize(model, info), ""
	}
	// Too big to draw whole: draw the first partition porcupine could not
	// linearize, alone, if it is small enough.
	partials := info.PartialLinearizations()
	for p, size := range sizes {
		if p < len(partials) && complete(partials[p], size) {
			continue
		}
		if size > o.VisualizeLimit {
			return res, nil, fmt.Sprintf("no visualization: key %q has %d acquisitions, more than %d", keys[p], size, o.VisualizeLimit)
		}
		var sub []porcupine.Operation
		for _, po := range ops {
			if po.Input.(tokenInput).key == keys[p] {
				sub = append(sub, po)
			}
		}
		_, subInfo := porcupine.CheckOperationsVerbose(model, sub, o.Timeout)
		return res, visualize(model, subInfo), fmt.Sprintf("visualization of key %q only", keys[p])
	}
	return res, nil, ""
}

func complete(partials [][]int, size int) bool {
	for _, p := range partials {
		if len(p) == size {
			return true
		}
	}
	return false
}

func visualize(model porcupine.Model, info porcupine.LinearizationInfo) []byte {
	var buf bytes.Buffer
	if err := porcupine.Visualize(model, info, &buf); err != nil {
		return nil
	}
	return buf.Bytes()
}

// tokenViolation is what tokenSweep found: why the acquisitions of a key
// are not linearizable, and the operations involved.
type tokenViolation struct {
	msg string
	ops []*history.Operation
}

// tokenSweep decides whether one key's acquisitions (indices into h.Ops: ok
// and info ones; fail ones dropped) are linearizable with the token model of
// porcupineTokens — monotonic, or dense — in O(n log n). It returns nil when
// they are, else the first violation it finds.
//
// Why it decides exactly what porcupine does. Porcupine orders an operation
// before another only when it returned strictly before the other was
// invoked; info acquisitions return after everything (end of the history +
// 1), so nothing has to follow them and any of them can be linearized last.
//
//   - Ok acquisitions must be linearized in increasing token order (both
//     models accept an ok token only above the previous one), so tokens are
//     unique, and no acquisition may have returned strictly before one with
//     a smaller token was invoked: scanning them by token, each return is
//     not before the largest invocation time seen so far. The monotonic
//     model starts at 0: the smallest token is positive. That is all it
//     asks: info acquisitions are accepted in any state and change none.
//   - The dense model also asks that between consecutive ok tokens x < y
//     (in token order) at least y-x-1 info acquisitions be linearized, each
//     counting for at most one. An info acquisition can be placed between
//     the ok acquisitions of tokens x and y exactly when it was invoked no
//     later than every ok acquisition from y on returned (the suffix minimum
//     of returns, S(y)). S grows with y, so the sets of info acquisitions
//     that can fill each gap are nested, and Hall's condition reduces to
//     prefixes: for every y, the info acquisitions invoked no later than
//     S(y) are at least the tokens missing below y (above the first ok
//     token; before the first ok acquisition the counter is unknown).
//
// TestTokenSweepMatchesPorcupine compares both on random histories with info
// acquisitions, duplicates and regressions.
func tokenSweep(h *history.History, idx []int, dense bool) *tokenViolation {
	oks := make([]int, 0, len(idx))
	var infoCalls []int64
	for _, k := range idx {
		if op := &h.Ops[k]; op.Type == history.OK {
			oks = append(oks, k)
		} else {
			infoCalls = append(infoCalls, op.T)
		}
	}
	if len(oks) == 0 {
		return nil
	}
	slices.SortFunc(oks, func(a, b int) int {
		return cmp.Or(cmp.Compare(h.Ops[a].Token, h.Ops[b].Token), cmp.Compare(a, b))
	})
	if first := &h.Ops[oks[0]]; !dense && first.Token <= 0 {
		return &tokenViolation{fmt.Sprintf("token %d is not above the counter's initial 0", first.Token), []*history.Operation{first}}
	}
	latest := 0 // in oks: the latest invoked so far
	for j := 1; j < len(oks); j++ {
		prev, op := &h.Ops[oks[j-1]], &h.Ops[oks[j]]
		if prev.Token == op.Token {
			return &tokenViolation{fmt.Sprintf("token %d granted twice", op.Token), []*history.Operation{prev, op}}
		}
		if inv := &h.Ops[oks[latest]]; op.Return < inv.T {
			return &tokenViolation{fmt.Sprintf("token %d returned at %s, before the acquisition of the smaller token %d was invoked at %s",
				op.Token, fmtT(op.Return), inv.Token, fmtT(inv.T)), []*history.Operation{inv, op}}
		}
		if op.T > h.Ops[oks[latest]].T {
			latest = j
		}
	}
	if !dense {
		return nil
	}
	sufMin := make([]int64, len(oks))
	sufMin[len(oks)-1] = h.Ops[oks[len(oks)-1]].Return
	for j := len(oks) - 2; j >= 0; j-- {
		sufMin[j] = min(sufMin[j+1], h.Ops[oks[j]].Return)
	}
	slices.Sort(infoCalls)
	var missing int64 // tokens missing so far (saturating)
	eligible := 0     // info acquisitions invoked no later than sufMin[j]
	for j := 1; j < len(oks); j++ {
		prev, op := &h.Ops[oks[j-1]], &h.Ops[oks[j]]
		gap := op.Token - prev.Token - 1
		if gap < 0 { // the difference overflowed
			gap = math.MaxInt64
		}
		missing = addSat(missing, gap)
		for eligible < len(infoCalls) && infoCalls[eligible] <= sufMin[j] {
			eligible++
		}
		if missing > int64(eligible) {
			return &tokenViolation{fmt.Sprintf("tokens missing between %d and %d: %s missing up to %d, and only %s invoked by %s, in time to have consumed one",
				prev.Token, op.Token, Plural(missing, "token"), op.Token, Plural(eligible, "info acquisition"), fmtT(sufMin[j])), []*history.Operation{prev, op}}
		}
	}
	return nil
}

// porcupineWindow draws porcupine's visualization of a window of at most
// VisualizeLimit acquisitions of a key too large to draw whole (idx, in
// invocation order), around the operations of a violation: the first of
// groups (the evidence's operations) that fits in one. It draws only when
// porcupine finds the window itself not linearizable: a violation that needs
// acquisitions outside the window (a dense counter's missing tokens that
// info acquisitions before the window would have explained but for earlier
// gaps) is not drawn. The note says what was drawn, or why nothing was.
func porcupineWindow(h *history.History, key string, idx []int, groups [][]*history.Operation, o Options) ([]byte, string) {
	none := fmt.Sprintf("no visualization: key %q has %d acquisitions, more than %d", key, len(idx), o.VisualizeLimit)
	for _, around := range groups {
		lo, hi := len(idx), -1
		for _, op := range around {
			// idx is in invocation order, as History.Ops, numbered by I.
			p, found := slices.BinarySearchFunc(idx, op.I, func(k int, i int64) int { return cmp.Compare(h.Ops[k].I, i) })
			if found {
				lo, hi = min(lo, p), max(hi, p)
			}
		}
		if hi < 0 || hi-lo+1 > o.VisualizeLimit {
			continue
		}
		from := max(0, lo-(o.VisualizeLimit-(hi-lo+1))/2)
		to := min(len(idx), from+o.VisualizeLimit)
		from = max(0, to-o.VisualizeLimit)
		sub := idx[from:to]
		res, viz, _ := porcupineTokens(h, map[string][]int{key: sub}, []string{key}, o)
		switch {
		case res == porcupine.Ok:
			return nil, none + "; the window of it around the violation is linearizable alone"
		case res != porcupine.Illegal || viz == nil:
			return nil, none + "; porcupine timed out on the window of it around the violation"
		}
		return viz, fmt.Sprintf("visualization of %d of key %q's %d acquisitions, around the violation", len(sub), key, len(idx))
	}
	return nil, none
}
