package models

import (
	"bytes"
	"cmp"
	"fmt"
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
// evidence. Then porcupine checks the same history against a monotonic
// counter model, partitioned by key, fail acquisitions dropped, info ones
// given a return at the end of the history and an output the model accepts
// in any state (they may or may not have consumed a token). With
// Options.DenseTokens the model is a counter incremented exactly once per
// grant, so tokens must be consecutive except where info acquisitions may
// have consumed one. A porcupine timeout gives UNKNOWN, never PASS.
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
			r.Summary += fmt.Sprintf(" (no visualization: key %q has %d acquisitions, more than %d)", failing[0], size, o.VisualizeLimit)
		}
	} else {
		res, viz, note := porcupineTokens(h, byKey, keys, o)
		switch res {
		case porcupine.Ok:
			r = c.result("token-order", n, fmt.Sprintf("%d acquisitions on %d keys: tokens unique and increasing in real-time order (porcupine: linearizable)", n, len(keys)))
		case porcupine.Illegal:
			c.fail(KindNotLinearizable, "", "porcupine: not linearizable with the "+modelName(o)+" (see the visualization)")
			r = c.result("token-order", n, "")
		default:
			c.undecided("", fmt.Sprintf("porcupine timed out after %v; the direct check found no violation", o.Timeout))
			r = c.result("token-order", n, "")
		}
		r.Visualization = viz
		if note != "" {
			r.Summary += " (" + note + ")"
		}
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
	var oks []int
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

// porcupineTokens runs porcupine on the acquisitions of keys. It returns the
// result, the visualization when the result is not Ok (if small enough), and
// a note on what was or was not drawn.
func porcupineTokens(h *history.History, byKey map[string][]int, keys []string, o Options) (porcupine.CheckResult, []byte, string) {
	model := tokenModel(h, o)
	end := h.End + 1
	clients := make(map[int]int)
	var ops []porcupine.Operation
	var sizes []int
	for _, key := range keys {
		sizes = append(sizes, len(byKey[key]))
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
