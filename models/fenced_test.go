package models

import (
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

func ownedWrite(key string, token int64, owner string) history.Op {
	return history.Op{F: history.FWrite, Key: key, Token: token, Owner: owner}
}

func seqWrite(key string, token, seq int64) history.Op {
	return history.Op{F: history.FWrite, Key: key, Token: token, Seq: seq}
}

func TestFencedResourcePass(t *testing.T) {
	cases := map[string]*builder{
		"empty":  {},
		"single": new(builder).ok(1, 0, 10, write("r", 3)),
		"equal tokens repeat": new(builder).
			ok(1, 0, 10, write("r", 3)).ok(1, 20, 30, write("r", 3)).ok(2, 40, 50, write("r", 4)).ok(2, 60, 70, write("r", 4)),
		"stale write rejected":        new(builder).ok(1, 0, 10, write("r", 5)).fail(2, 20, 30, write("r", 4)),
		"non-positive token rejected": new(builder).fail(1, 0, 10, write("r", 0)).fail(2, 20, 30, write("r", -1)),
		// Concurrent: the resource may have applied 5 first and rejected 4.
		"concurrent rejection": new(builder).ok(1, 0, 50, write("r", 5)).fail(2, 10, 40, write("r", 4)),
		// Concurrent: it may have applied 4 then 5.
		"concurrent acceptance": new(builder).ok(1, 0, 50, write("r", 5)).ok(2, 10, 60, write("r", 4)),
		// An info write with a larger token may have been applied.
		"info justifies rejection": new(builder).ok(1, 0, 10, write("r", 3)).info(2, 20, 30, write("r", 9)).fail(3, 40, 50, write("r", 5)),
		"seq order": new(builder).
			ok(1, 0, 100, seqWrite("r", 5, 2)).ok(2, 0, 100, seqWrite("r", 4, 1)).fail(3, 0, 100, seqWrite("r", 3, 3)).
			ok(4, 0, 100, seqWrite("r", 5, 4)),
		"resources are independent": new(builder).ok(1, 0, 10, write("a", 9)).ok(2, 20, 30, write("b", 1)),
		"one owner repeats its token": new(builder).
			ok(1, 0, 10, ownedWrite("r", 3, "A")).ok(1, 20, 30, ownedWrite("r", 3, "A")).ok(2, 40, 50, ownedWrite("r", 4, "B")),
		"same token on two resources": new(builder).ok(1, 0, 10, ownedWrite("a", 3, "A")).ok(2, 20, 30, ownedWrite("b", 3, "B")),
		// A rejected write with a reused token took no effect.
		"reused token rejected": new(builder).ok(1, 0, 10, ownedWrite("r", 3, "A")).ok(1, 20, 30, ownedWrite("r", 4, "A")).
			fail(2, 40, 50, ownedWrite("r", 3, "B")),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			expect(t, CheckFencedResource(b.build(t), Options{}), Pass)
		})
	}
}

func TestFencedResourceFail(t *testing.T) {
	cases := map[string]struct {
		b    *builder
		want string
	}{
		"stale write accepted": {new(builder).ok(1, 0, 10, write("r", 5)).ok(2, 20, 30, write("r", 4)), "stale write accepted: token 4"},
		"unfenced resource": {new(builder).ok(1, 0, 10, write("r", 7)).ok(2, 20, 30, write("r", 3)).ok(1, 40, 50, write("r", 8)).
			ok(2, 60, 70, write("r", 3)), "2 violations"},
		"current write rejected":   {new(builder).ok(1, 0, 10, write("r", 5)).fail(2, 20, 30, write("r", 6)), "write with token 6 rejected"},
		"equal token rejected":     {new(builder).ok(1, 0, 10, write("r", 5)).fail(2, 20, 30, write("r", 5)), "write with token 5 rejected"},
		"first write rejected":     {new(builder).fail(1, 0, 10, write("r", 1)), "rejected"},
		"zero token accepted":      {new(builder).ok(1, 0, 10, write("r", 0)), "non-positive token 0"},
		"seq: stale accepted":      {new(builder).ok(1, 0, 100, seqWrite("r", 5, 1)).ok(2, 0, 100, seqWrite("r", 4, 2)), "seq 2 after seq 1"},
		"seq: current rejected":    {new(builder).ok(1, 0, 100, seqWrite("r", 5, 1)).fail(2, 0, 100, seqWrite("r", 5, 2)), "rejected (seq 2)"},
		"seq: first rejected":      {new(builder).fail(1, 0, 100, seqWrite("r", 5, 1)), "no token had been accepted"},
		"boundary: after a return": {new(builder).ok(1, 0, 10, write("r", 5)).ok(2, 11, 30, write("r", 4)), "stale"},
		"token reused by another owner": {new(builder).ok(1, 0, 10, ownedWrite("r", 5, "A")).ok(2, 20, 30, ownedWrite("r", 5, "B")),
			"token 5 reused by another owner: accepted from owner A"},
		"reuse found in seq order too": {new(builder).ok(1, 0, 100, history.Op{F: history.FWrite, Key: "r", Token: 5, Owner: "A", Seq: 1}).
			ok(2, 0, 100, history.Op{F: history.FWrite, Key: "r", Token: 5, Owner: "B", Seq: 2}), "reused by another owner"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			expect(t, CheckFencedResource(c.b.build(t), Options{}), Fail, c.want)
		})
	}
}

func TestFencedResourceBoundaryIsConcurrent(t *testing.T) {
	// The accepted write returned at 10; the stale one was invoked at 10:
	// concurrent, so the resource may have applied it first.
	h := new(builder).ok(1, 0, 10, write("r", 5)).ok(2, 10, 30, write("r", 4)).build(t)
	expect(t, CheckFencedResource(h, Options{}), Pass)
}

func TestFencedResourceDuplicateSeqIsUnknown(t *testing.T) {
	h := new(builder).ok(1, 0, 100, seqWrite("r", 5, 1)).ok(2, 0, 100, seqWrite("r", 6, 1)).build(t)
	expect(t, CheckFencedResource(h, Options{}), Unknown, "ambiguous")
}

// Violations are counted and evidenced by kind: a flood of one kind does not
// crowd out the evidence of another (a resource that ignores tokens after a
// counter regression showed only "token reused" lines, hiding its stale
// writes), and each kind says when its first violation was complete.
func TestViolationKinds(t *testing.T) {
	b := new(builder)
	// 30 tokens reused by another owner (a regressed counter), then one stale
	// write accepted at the end.
	for k := int64(0); k < 30; k++ {
		at := 100 + 40*k
		b.ok(1, at, at+10, ownedWrite("r", 10+k, "A")).ok(2, at+20, at+30, ownedWrite("r", 10+k, "B"))
	}
	b.ok(3, 5000, 5010, ownedWrite("r", 3, "C"))
	r := CheckFencedResource(b.build(t), Options{MaxEvidence: 5})
	if r.Verdict != Fail {
		t.Fatalf("verdict %v", r.Verdict)
	}
	if r.Kinds[KindTokenReused] != 30 || r.Kinds[KindStaleWrite] != 1 || r.Violations != 31 {
		t.Fatalf("kinds %v, violations %d; want 30 token-reused and 1 stale-write", r.Kinds, r.Violations)
	}
	var stale, reused int
	for _, e := range r.Evidence {
		switch e.Kind {
		case KindStaleWrite:
			stale++
		case KindTokenReused:
			reused++
		}
	}
	if stale != 1 || reused != 5 {
		t.Fatalf("evidence: %d stale-write, %d token-reused; want 1 and 5 (MaxEvidence per kind)", stale, reused)
	}
	if r.Earliest[KindTokenReused] != 130 || r.Earliest[KindStaleWrite] != 5010 {
		t.Fatalf("earliest %v; want token-reused at 130, stale-write at 5010", r.Earliest)
	}
}

// Writes of unknown outcome (info: the reply was lost, the link timed out)
// may or may not have been applied, at any point after their invocation.
// They must cause no false FAIL — a rejection they may explain, an
// acceptance they may not have blocked — and hide no stale write the
// resource was seen to accept.
func TestFencedResourceInfoWrites(t *testing.T) {
	pass := map[string]*builder{
		// The info write with token 9 may have been applied: 5 was stale then.
		"seq: info justifies rejection": new(builder).ok(1, 0, 10, seqWrite("r", 3, 1)).info(2, 20, 30, write("r", 9)).
			fail(3, 40, 50, seqWrite("r", 5, 3)),
		// Concurrent with the rejection: it may have been applied just before.
		"seq: concurrent info justifies rejection": new(builder).ok(1, 0, 10, seqWrite("r", 3, 1)).info(2, 45, 200, write("r", 9)).
			fail(3, 40, 50, seqWrite("r", 5, 3)),
		// The info write with token 9 may not have been applied: 5 is fine.
		"seq: info may not have been applied": new(builder).ok(1, 0, 10, seqWrite("r", 3, 1)).info(2, 20, 30, write("r", 9)).
			ok(3, 40, 50, seqWrite("r", 5, 3)),
		"real time: info may not have been applied": new(builder).ok(1, 0, 10, write("r", 3)).info(2, 20, 30, write("r", 9)).
			ok(3, 40, 50, write("r", 5)),
		// An info write the resource applied took a seq nobody recorded.
		"seq: gaps left by info writes": new(builder).ok(1, 0, 10, seqWrite("r", 3, 1)).info(2, 20, 30, write("r", 3)).
			ok(3, 40, 50, seqWrite("r", 4, 5)),
		// A write that never completed (the run ended) may apply any time.
		"seq: pending write justifies rejection": new(builder).ok(1, 0, 10, seqWrite("r", 3, 1)).info(2, 20, -1, write("r", 9)).
			fail(3, 40, 50, seqWrite("r", 5, 3)),
	}
	for name, b := range pass {
		t.Run(name, func(t *testing.T) { expect(t, CheckFencedResource(b.build(t), Options{}), Pass) })
	}
	fail := map[string]struct {
		b    *builder
		want string
	}{
		// Whatever the info write did, 4 came after an accepted 5.
		"seq: info hides no stale accept": {new(builder).ok(1, 0, 10, seqWrite("r", 5, 1)).info(2, 20, 30, write("r", 9)).
			ok(3, 40, 50, seqWrite("r", 4, 2)), "stale write accepted: token 4 after token 5"},
		"real time: info hides no stale accept": {new(builder).ok(1, 0, 10, write("r", 5)).info(2, 20, 30, write("r", 2)).
			ok(3, 40, 50, write("r", 4)), "stale write accepted: token 4"},
		// An info write with a smaller token cannot explain the rejection.
		"seq: smaller info explains no rejection": {new(builder).ok(1, 0, 10, seqWrite("r", 3, 1)).info(2, 20, 30, write("r", 4)).
			fail(3, 40, 50, seqWrite("r", 5, 2)), "write with token 5 rejected (seq 2)"},
		// Invoked after the rejection returned: it cannot have come first.
		"seq: later info explains no rejection": {new(builder).ok(1, 0, 10, seqWrite("r", 3, 1)).fail(3, 20, 30, seqWrite("r", 5, 2)).
			info(2, 40, 50, write("r", 9)), "write with token 5 rejected (seq 2)"},
		"real time: later info explains no rejection": {new(builder).ok(1, 0, 10, write("r", 3)).fail(3, 20, 30, write("r", 5)).
			info(2, 40, 50, write("r", 9)), "write with token 5 rejected"},
	}
	for name, c := range fail {
		t.Run(name, func(t *testing.T) { expect(t, CheckFencedResource(c.b.build(t), Options{}), Fail, c.want) })
	}
}
