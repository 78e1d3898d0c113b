package models

import (
	"reflect"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// An effect is dated from the fault that had it (the kill), not from the heal
// that revealed it (the restart), and is no degradation for progress.
func TestEffects(t *testing.T) {
	nem := func(key, v string) history.Op { return history.Op{F: history.FNemesis, Key: key, Value: v} }
	b := new(builder)
	b.ok(9, m(100), m(101), nem(NemesisFault, "kill -9 n1"))
	b.ok(9, m(400), m(450), nem(NemesisHeal, "restart n1"))
	b.ok(9, m(451), m(451), nem(NemesisEffect, "dataset lost"))
	b.ok(9, m(900), m(950), nem(NemesisEvent, "failover"))
	b.ok(9, m(951), m(951), nem(NemesisEffect, "offset lost"))
	got := Effects(b.build(t))
	want := []Effect{{From: m(100), At: m(451), What: "dataset lost"}, {From: m(900), At: m(951), What: "offset lost"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Effects = %+v, want %+v", got, want)
	}
	// An ongoing effect ends where the history observed its end (the
	// deposed primary demoted), and carries the kinds it explains.
	b = new(builder)
	b.ok(9, m(100), m(110), nem(NemesisEvent, "failover"))
	ongoing := nem(NemesisEffectOngoing, "writes lost")
	b.ok(9, m(120), m(120), ongoing)
	b.ok(9, m(150), m(150), nem(NemesisFault, "cut a client"))
	b.ok(9, m(400), m(400), nem(NemesisEffectEnd, "n1 demoted"))
	evicted := nem(NemesisEffect, "lease evicted")
	evicted.Explains = KindOverlap + "," + KindOwnerConflict
	b.ok(9, m(500), m(500), evicted)
	got = Effects(b.build(t))
	want = []Effect{{From: m(100), At: m(120), What: "writes lost", Ongoing: true, End: m(400)},
		{From: m(150), At: m(500), What: "lease evicted", Kinds: []string{KindOverlap, KindOwnerConflict}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Effects = %+v, want %+v", got, want)
	}
	if got[0].Until() != m(400) || !got[0].Explains(KindTokenRegressed) || got[1].Explains(KindTokenRegressed) || !got[1].Explains(KindOverlap) {
		t.Fatalf("Until %v, Explains wrong: %+v", got[0].Until(), got)
	}
	// Review: with two failovers open, n1's demotion ends n1's loss, not
	// the later one of n2.
	b = new(builder)
	on := func(node string) history.Op {
		o := nem(NemesisEffectOngoing, "lost on "+node)
		o.Field = node
		return o
	}
	end := func(node string) history.Op { o := nem(NemesisEffectEnd, node+" demoted"); o.Field = node; return o }
	b.ok(9, m(100), m(100), on("n1"))
	b.ok(9, m(200), m(200), on("n2"))
	b.ok(9, m(300), m(300), end("n1"))
	got = Effects(b.build(t))
	if len(got) != 2 || got[0].End != m(300) || got[1].End != 0 {
		t.Fatalf("n1's demotion ended %+v", got)
	}
	if u := (Effect{At: m(10), Ongoing: true}).Until(); u != m(10)+int64(OngoingFor) {
		t.Fatalf("an ongoing effect without an observed end reaches %v", u)
	}
	if len(Effects(new(builder).build(t))) != 0 {
		t.Fatal("effects in an empty history")
	}
	// An effect in the healthy tail does not end it: the failures after it
	// are still judged (and fail the run).
	b = cycles(new(builder), "OOM command not allowed", "")
	b.ok(9, m(1), m(1), nem(NemesisEffect, "evicted_keys 12"))
	expect(t, CheckProgress(b.build(t), Options{}), Fail)
}
