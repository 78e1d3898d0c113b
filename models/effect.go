package models

import (
	"slices"
	"strings"

	"github.com/coordtorture/coordtorture/history"
)

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

// NemesisEffectEnd marks the observation that the loss of the latest ongoing
// effect before it ended: the deposed primary was seen demoted. From then on
// that effect explains nothing new; without one, OngoingFor bounds it.
const NemesisEffectEnd = "effect-end"

// IsEffect reports whether a nemesis operation's key marks an observation
// of an effect (its proof, or the end of its loss), not a fault.
func IsEffect(key string) bool {
	return key == NemesisEffect || key == NemesisEffectOngoing || key == NemesisEffectEnd
}

// TokenLossKinds are the violation kinds a lost fencing counter (or lost
// increments of it) explains: a token granted twice or out of order, and a
// token the resource then accepts from two owners.
var TokenLossKinds = []string{KindTokenDuplicate, KindTokenRegressed, KindNotLinearizable, KindTokenReused}

// LeaseLossKinds are the violation kinds a lost or early-expired lease,
// permit, owner entry or window explains (an evicted lease key, a server
// clock moved ahead): two holders at once, more permits than the capacity,
// an owner answered as another's or denied its own, more granted than a
// window allows. Not the tokens (a clock or a lease eviction leaves the
// counter alone), and not an entry left behind or a waiter left waiting
// (entries that end early leave nothing behind and free their waiters).
var LeaseLossKinds = []string{KindOverlap, KindOverCapacity, KindOwnerConflict, KindWronglyDenied, KindOverLimit}

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
	// Ongoing: the loss may go on after At (NemesisEffectOngoing), until
	// End when its end was observed, else for up to OngoingFor.
	Ongoing bool
	// End is when the end of an ongoing loss was observed (the deposed
	// primary demoted: NemesisEffectEnd), or 0 when it was not.
	End int64
	// Kinds are the violation kinds the effect can explain (the history's
	// "explains"); nil: any (a lost dataset, a failover: every write may be
	// lost).
	Kinds []string
	// node is the deposed primary whose demotion ends an ongoing effect
	// (the records' field), "" when not named.
	node string
}

// Explains reports whether the effect can explain a violation of kind.
func (ef Effect) Explains(kind string) bool {
	return ef.Kinds == nil || slices.Contains(ef.Kinds, kind)
}

// Until is the last instant state made can still be lost to the effect: At,
// or for an ongoing loss its observed End (at least At), else At +
// OngoingFor.
func (ef Effect) Until() int64 {
	if !ef.Ongoing {
		return ef.At
	}
	if ef.End > 0 {
		return max(ef.At, ef.End)
	}
	return addSat(ef.At, int64(OngoingFor))
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
			ef := Effect{From: f, At: op.T, What: op.Value, Ongoing: op.Key == NemesisEffectOngoing, node: op.Field}
			if op.Explains != "" {
				for _, k := range strings.Split(op.Explains, ",") {
					ef.Kinds = append(ef.Kinds, strings.TrimSpace(k))
				}
			}
			out = append(out, ef)
		case NemesisEffectEnd:
			// Ends the latest ongoing effect still open of the same node
			// (field: the deposed primary; either side without one
			// matches any).
			for i := len(out) - 1; i >= 0; i-- {
				if out[i].Ongoing && out[i].End == 0 && (op.Field == "" || out[i].node == "" || out[i].node == op.Field) {
					out[i].End = op.T
					break
				}
			}
		case NemesisHeal:
		default:
			from = op.T
		}
	}
	return out
}
