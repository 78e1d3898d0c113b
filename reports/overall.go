package reports

import (
	"slices"

	"github.com/coordtorture/coordtorture/scenarios"
)

// Overall is the run's verdict, the one that sets coordtorture's exit
// status: when prim ran beside other implementations (--impl all: the peer
// libraries and the mutants) only prim's verdicts count, the others being a
// comparison; otherwise the worst verdict of the run.
func (r *Run) Overall() scenarios.Verdict {
	prim := slices.ContainsFunc(r.Outcomes, func(o *scenarios.Outcome) bool { return o.Impl == "prim" })
	if prim && slices.ContainsFunc(r.Outcomes, func(o *scenarios.Outcome) bool { return o.Impl != "prim" }) {
		return r.VerdictOf("prim")
	}
	return r.Verdict()
}
