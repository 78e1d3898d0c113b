package scenarios

import (
	"context"
	"testing"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
)

// TestVerifyCompletionCutOff: latch/lost-notifications is UNKNOWN unless a
// count reached zero inside a proven cut (from the cut's completion to the
// start of a heal that found the waiters' tracking connections closed); a
// zero outside every cut, or inside an unproven one, checks nothing.
func TestVerifyCompletionCutOff(t *testing.T) {
	nem := func(kind string, t0, t1 int64, value string) history.Operation {
		return history.Operation{Op: history.Op{F: history.FNemesis, Key: kind, Type: history.OK, T: t0, Value: value}, Return: t1, Done: true}
	}
	zero := func(t0, t1 int64) history.Operation {
		return history.Operation{Op: history.Op{F: history.FLatchCountDown, Key: "l", Type: history.OK, T: t0, Count: 0}, Return: t1, Done: true}
	}
	one := func(t0, t1 int64) history.Operation {
		return history.Operation{Op: history.Op{F: history.FLatchCountDown, Key: "l", Type: history.OK, T: t0, Count: 1}, Return: t1, Done: true}
	}
	proven := "heal (2 of the waiters' 3 tracking connections closed by the cut)"
	for _, c := range []struct {
		name string
		ops  []history.Operation
		want models.Verdict
	}{
		{"zero inside a proven cut", []history.Operation{nem(models.NemesisFault, 100, 110, "cut"), zero(120, 130), nem(models.NemesisHeal, 400, 420, proven)}, models.Pass},
		{"no cut", []history.Operation{zero(120, 130)}, models.Unknown},
		{"zero before the cut was in place", []history.Operation{nem(models.NemesisFault, 100, 110, "cut"), zero(105, 130), nem(models.NemesisHeal, 400, 420, proven)}, models.Unknown},
		{"zero answered after the heal began", []history.Operation{nem(models.NemesisFault, 100, 110, "cut"), zero(120, 410), nem(models.NemesisHeal, 400, 420, proven)}, models.Unknown},
		{"cut not proven", []history.Operation{nem(models.NemesisFault, 100, 110, "cut"), zero(120, 130), nem(models.NemesisHeal, 400, 420, "heal")}, models.Unknown},
		{"only a non-zero count-down in the cut", []history.Operation{nem(models.NemesisFault, 100, 110, "cut"), one(120, 130), nem(models.NemesisHeal, 400, 420, proven)}, models.Unknown},
	} {
		h := &history.History{Ops: c.ops}
		r := verifyCompletionCutOff(context.Background(), nil, h)
		if r.Verdict != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, r.Verdict, r.Summary, c.want)
		}
	}
}
