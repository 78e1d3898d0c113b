package models

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/coordtorture/coordtorture/history"
)

// sweepFunc has tokenSweep's signature, so that the equivalence test can
// run deliberately broken variants of it.
type sweepFunc func(h *history.History, idx []int, dense bool) *tokenViolation

// randomTokenHistory builds a small history of acquisitions on one or two
// keys, each by its own process, with overlapping intervals and ties (times
// on a coarse grid): ok ones take a token at a random instant of their
// interval from a per-key counter, info ones consume one or not, some never
// complete, some fail; then tokens are perturbed (duplicates, regressions,
// gaps, non-positive tokens) in half of the histories.
func randomTokenHistory(t testing.TB, r *rand.Rand) *history.History {
	type acqEv struct {
		at   int64
		n    int
		skip bool
	}
	n := 1 + r.IntN(9)
	b := new(builder)
	var evs []acqEv
	toks := make([]int64, n)
	types := make([]history.Type, n)
	calls, rets := make([]int64, n), make([]int64, n)
	keys := make([]string, n)
	for k := 0; k < n; k++ {
		calls[k] = int64(r.IntN(30))
		rets[k] = calls[k] + int64(r.IntN(12))
		keys[k] = "k"
		if r.IntN(5) == 0 {
			keys[k] = "j"
		}
		switch x := r.IntN(20); {
		case x < 12:
			types[k] = history.OK
		case x < 18:
			types[k] = history.Info
		default:
			types[k] = history.Fail
		}
		evs = append(evs, acqEv{calls[k] + r.Int64N(rets[k]-calls[k]+1), k, types[k] != history.OK && r.IntN(2) == 0})
	}
	slices.SortStableFunc(evs, func(x, y acqEv) int { return int(x.at - y.at) })
	next := map[string]int64{"k": int64(r.IntN(3)), "j": int64(r.IntN(3))}
	for _, e := range evs {
		if e.skip || types[e.n] == history.Fail {
			continue
		}
		next[keys[e.n]]++
		toks[e.n] = next[keys[e.n]]
	}
	if r.IntN(2) == 0 {
		for m := 1 + r.IntN(2); m > 0; m-- {
			k := r.IntN(n)
			switch r.IntN(4) {
			case 0:
				toks[k] = toks[r.IntN(n)] // a duplicate
			case 1:
				toks[k] -= 1 + r.Int64N(3) // a regression (or non-positive)
			case 2:
				toks[k] += 1 + r.Int64N(3) // a gap
			default:
				toks[k] = -r.Int64N(2)
			}
		}
	}
	for k := 0; k < n; k++ {
		op := acq(keys[k], 0, 100)
		ret := rets[k]
		switch types[k] {
		case history.OK:
			op.Token = toks[k]
		case history.Info:
			if r.IntN(3) == 0 {
				ret = -1
			}
		}
		b.add(k+1, calls[k], ret, types[k], op)
	}
	return b.build(t)
}

// tokenKeys returns CheckTokenOrder's input: acquisitions by key.
func tokenKeys(h *history.History) map[string][]int {
	byKey := make(map[string][]int)
	for k := range h.Ops {
		op := &h.Ops[k]
		if !isTokenAcquire(op.F) || op.Type == history.Fail || op.Type == history.OK && op.Token == 0 {
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], k)
	}
	return byKey
}

// disagreements runs sweep and porcupine on count random histories, each
// key on its own, and returns how many times they disagree (and an
// example), and how many keys each found linearizable or not.
func disagreements(t testing.TB, sweep sweepFunc, dense bool, count int, seed uint64) (bad int, example string, legal, illegal int) {
	r := rand.New(rand.NewPCG(seed, 99))
	o := Options{DenseTokens: dense, Timeout: 10 * time.Second}.withDefaults()
	for i := 0; i < count; i++ {
		h := randomTokenHistory(t, r)
		byKey := tokenKeys(h)
		for key, idx := range byKey {
			model := tokenModel(h, o)
			res := porcupine.CheckOperationsTimeout(model, tokenOperations(h, byKey, []string{key}), o.Timeout)
			if res == porcupine.Unknown {
				t.Fatalf("porcupine timed out on %d operations", len(idx))
			}
			v := sweep(h, idx, dense)
			if res == porcupine.Ok {
				legal++
			} else {
				illegal++
			}
			if (v == nil) != (res == porcupine.Ok) {
				bad++
				if example == "" {
					example = fmt.Sprintf("porcupine %v, sweep %+v on key %q:\n", res, v, key)
					for _, k := range idx {
						example += "  " + h.Ops[k].String() + "\n"
					}
				}
			}
		}
	}
	return bad, example, legal, illegal
}

// TestTokenSweepMatchesPorcupine: on random histories with info
// acquisitions (completed or never), fail ones, duplicates, regressions,
// gaps and ties, the sweep finds a key's acquisitions linearizable exactly
// when porcupine does, with the monotonic and the dense model.
func TestTokenSweepMatchesPorcupine(t *testing.T) {
	count := 20_000
	if testing.Short() {
		count = 3_000
	}
	for _, dense := range []bool{false, true} {
		t.Run(modelName(Options{DenseTokens: dense}), func(t *testing.T) {
			bad, example, legal, illegal := disagreements(t, tokenSweep, dense, count, 1)
			t.Logf("%d keys linearizable, %d not", legal, illegal)
			if bad > 0 {
				t.Fatalf("%d disagreements; first: %s", bad, example)
			}
			// Both outcomes are well represented, or the test proves little.
			if legal < count/10 || illegal < count/10 {
				t.Fatalf("unbalanced: %d linearizable, %d not", legal, illegal)
			}
		})
	}
}

// TestTokenSweepMutantsCaught: deliberately broken sweeps disagree with
// porcupine on the random histories of TestTokenSweepMatchesPorcupine, so
// that test would catch them.
func TestTokenSweepMutantsCaught(t *testing.T) {
	onlyOK := func(h *history.History, idx []int) []int {
		var out []int
		for _, k := range idx {
			if h.Ops[k].Type == history.OK {
				out = append(out, k)
			}
		}
		return out
	}
	// shifted runs the sweep on a copy of the history whose ok acquisitions
	// return d earlier (d = 1: ties between a return and an invocation
	// become order, as if equal times were not concurrent).
	shifted := func(h *history.History, d int64) *history.History {
		c := *h
		c.Ops = slices.Clone(h.Ops)
		for k := range c.Ops {
			if c.Ops[k].Type == history.OK {
				c.Ops[k].Return -= d
			}
		}
		return &c
	}
	mutants := []struct {
		name  string
		dense bool
		sweep sweepFunc
	}{
		{"info acquisitions ignored (dense)", true, func(h *history.History, idx []int, dense bool) *tokenViolation {
			return tokenSweep(h, onlyOK(h, idx), dense)
		}},
		{"info acquisitions count twice (dense)", true, func(h *history.History, idx []int, dense bool) *tokenViolation {
			var twice []int
			for _, k := range idx {
				twice = append(twice, k)
				if h.Ops[k].Type != history.OK {
					twice = append(twice, k)
				}
			}
			return tokenSweep(h, twice, dense)
		}},
		{"equal times ordered", false, func(h *history.History, idx []int, dense bool) *tokenViolation {
			return tokenSweep(shifted(h, 1), idx, dense)
		}},
		{"equal times ordered (dense)", true, func(h *history.History, idx []int, dense bool) *tokenViolation {
			return tokenSweep(shifted(h, 1), idx, dense)
		}},
		{"no gap check (dense as monotonic)", true, func(h *history.History, idx []int, _ bool) *tokenViolation {
			return tokenSweep(h, idx, false)
		}},
		{"gap check on the monotonic model", false, func(h *history.History, idx []int, _ bool) *tokenViolation {
			return tokenSweep(h, idx, true)
		}},
		{"always linearizable", false, func(*history.History, []int, bool) *tokenViolation { return nil }},
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			if bad, _, _, _ := disagreements(t, m.sweep, m.dense, 3_000, 2); bad == 0 {
				t.Errorf("mutant %q agrees with porcupine on every history", m.name)
			}
		})
	}
}

// TestTokenOrderSweepOnlyMatchesPorcupine: the checker gives the same
// verdict whether porcupine decides (every key small) or the sweep alone
// does (VisualizeLimit 1: every key of more than one acquisition is large).
func TestTokenOrderSweepOnlyMatchesPorcupine(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 99))
	for i := 0; i < 3000; i++ {
		h := randomTokenHistory(t, r)
		for _, dense := range []bool{false, true} {
			withPorcupine := CheckTokenOrder(h, Options{DenseTokens: dense})
			sweepOnly := CheckTokenOrder(h, Options{DenseTokens: dense, VisualizeLimit: 1})
			nothing := strings.HasPrefix(withPorcupine.Summary, "nothing to check")
			if withPorcupine.Verdict != sweepOnly.Verdict || (withPorcupine.Verdict == Unknown && !nothing) {
				t.Fatalf("dense %v: porcupine %s, sweep %s\n%s", dense, describe(withPorcupine), describe(sweepOnly), historyText(h))
			}
		}
	}
}

func historyText(h *history.History) string {
	var s string
	for k := range h.Ops {
		s += h.Ops[k].String() + "\n"
	}
	return s
}

// TestTokenOrderLargeKeySweep: a key larger than VisualizeLimit is decided
// by the sweep, with evidence naming the acquisitions around an
// unexplained gap of a dense counter.
func TestTokenOrderLargeKeySweep(t *testing.T) {
	b := new(builder)
	for i := int64(0); i < 20; i++ {
		tok := i + 1
		if i >= 10 {
			tok += 2 // two tokens missing after token 10
		}
		b.ok(int(i)+1, 100*i, 100*i+10, acq("k", tok, 100))
	}
	b.info(50, 15, -1, acq("k", 0, 100)) // explains one of them
	h := b.build(t)
	expect(t, CheckTokenOrder(h, Options{DenseTokens: true}), Fail, "porcupine", "dense counter model")
	r := CheckTokenOrder(h, Options{DenseTokens: true, VisualizeLimit: 5})
	expect(t, r, Fail, "decided by the sweep alone", "tokens missing between 10 and 13: 2 tokens missing up to 13, and only 1 info")
	if r.Kinds[KindNotLinearizable] != 1 || len(r.Evidence[0].Ops) != 2 || r.Evidence[0].Ops[1].Token != 13 {
		t.Errorf("evidence: %s", describe(r))
	}
	expect(t, CheckTokenOrder(h, Options{VisualizeLimit: 5}), Pass, "decided by the sweep alone")
}

// TestTokenSweepExtremes: gaps too wide for int64 differences are missing
// tokens, not an overflow that hides them.
func TestTokenSweepExtremes(t *testing.T) {
	h := new(builder).
		ok(1, 0, 10, acq("k", math.MinInt64+1, 100)).
		info(2, 12, -1, acq("k", 0, 100)).
		ok(3, 20, 30, acq("k", math.MaxInt64, 100)).build(t)
	idx := tokenKeys(h)["k"]
	if v := tokenSweep(h, idx, true); v == nil || !strings.Contains(v.msg, fmt.Sprintf("%d tokens missing", int64(math.MaxInt64))) {
		t.Errorf("dense: %+v", v)
	}
	if v := tokenSweep(h, idx, false); v == nil || !strings.Contains(v.msg, "not above the counter's initial 0") {
		t.Errorf("monotonic: %+v", v)
	}
	h = new(builder).ok(1, 0, 10, acq("k", 1, 100)).ok(3, 20, 30, acq("k", 7, 100)).build(t)
	if v := tokenSweep(h, tokenKeys(h)["k"], true); v == nil || !strings.Contains(v.msg, "5 tokens missing up to 7, and only 0 info") {
		t.Errorf("dense gap: %+v", v)
	}
}

// TestTokenOrderWindowVisualization: a violation on a key too large to draw
// is drawn in a window of VisualizeLimit acquisitions around it, when the
// window alone is not linearizable (a regression; a dense gap no info
// acquisition in the window explains), and not drawn when it is.
func TestTokenOrderWindowVisualization(t *testing.T) {
	seqHistory := func(tokens []int64, info int64) *history.History {
		b := new(builder)
		for i, tok := range tokens {
			b.ok(i+1, 100*int64(i), 100*int64(i)+10, acq("k", tok, 100))
		}
		if info >= 0 {
			b.info(99, info, -1, acq("k", 0, 100))
		}
		return b.build(t)
	}
	var regress []int64
	for i := int64(1); i <= 30; i++ {
		regress = append(regress, i)
	}
	regress[20] = 3 // after 20: token 3 again, granted twice and regressed
	r := CheckTokenOrder(seqHistory(regress, -1), Options{VisualizeLimit: 6})
	expect(t, r, Fail, "visualization of 6 of key \"k\"'s 30 acquisitions, around the violation")
	if !bytes.Contains(r.Visualization, []byte("<html")) {
		t.Errorf("no visualization: %s", describe(r))
	}
	// Dense: tokens 1..10, 12..20, 22..30; one info acquisition.
	var gaps []int64
	for i := int64(1); i <= 30; i++ {
		if i != 11 && i != 21 {
			gaps = append(gaps, i)
		}
	}
	// Invoked early, the info acquisition explains the first gap only and
	// is outside the window: the window alone is not linearizable.
	r = CheckTokenOrder(seqHistory(gaps, 15), Options{DenseTokens: true, VisualizeLimit: 6})
	expect(t, r, Fail, "tokens missing between 20 and 22", "visualization of 6 of key")
	if r.Visualization == nil {
		t.Errorf("no visualization: %s", describe(r))
	}
	// Tokens 1..10, 12, 13, 15..: an info acquisition invoked at 1005
	// explains the first gap (10 to 12) and nothing else, but a window of 4
	// around the second (13 to 15) holds it and not the first gap: drawn
	// alone, the window is linearizable, so nothing is drawn and the note
	// says why.
	gaps = []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 15, 16, 17, 18, 19, 20}
	r = CheckTokenOrder(seqHistory(gaps, 1005), Options{DenseTokens: true, VisualizeLimit: 4})
	expect(t, r, Fail, "tokens missing between 13 and 15", "the window of it around the violation is linearizable alone")
	if r.Visualization != nil {
		t.Error("a visualization of a linearizable window")
	}
}
