package models

import (
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
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Effects = %+v, want %+v", got, want)
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
