package models

import "github.com/coordtorture/coordtorture/history"

// NemesisEffect marks a nemesis operation that is not a fault but the
// harness's proof that an earlier one had the effect its hazard needs: a
// restart that lost the dataset, a failover to a replica behind the old
// primary's replication offset, evicted keys, a server clock moved. Its value
// says what was observed.
const NemesisEffect = "effect"

// NemesisEffectOngoing is a NemesisEffect whose loss may go on after it was
// observed: a failover, whose deposed primary may take writes (and lose
// them) until it is demoted. Judge counts state made up to OngoingFor after
// it as lost.
const NemesisEffectOngoing = "effect-ongoing"

// IsEffect reports whether a nemesis operation's key marks a proof of an
// effect (an observation, not a fault).
func IsEffect(key string) bool { return key == NemesisEffect || key == NemesisEffectOngoing }

// Effect is one proven fault effect of a history.
type Effect struct {
	// From is when the fault that had the effect began: the invocation of the
	// latest fault or one-shot event before the proof (a kill, not the
	// restart that revealed the loss).
	From int64
	// At is when the effect was observed.
	At int64
	// What says what was observed.
	What string
	// Ongoing: the loss may go on after At (NemesisEffectOngoing), for up
	// to OngoingFor.
	Ongoing bool
}

// Effects lists the proven fault effects of h in time order. A hazard (a
// reused token, overlapping owners) can be blamed on a fault only from the
// From of an effect on: a fault that had no effect explains nothing.
func Effects(h *history.History) []Effect {
	var out []Effect
	from := int64(-1)
	for k := range h.Ops {
		op := &h.Ops[k]
		if op.F != history.FNemesis {
			continue
		}
		switch op.Key {
		case NemesisEffect, NemesisEffectOngoing:
			f := from
			if f < 0 {
				f = op.T
			}
			out = append(out, Effect{From: f, At: op.T, What: op.Value, Ongoing: op.Key == NemesisEffectOngoing})
		case NemesisHeal:
		default:
			from = op.T
		}
	}
	return out
}
