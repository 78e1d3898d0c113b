package scenarios_test

import (
	"testing"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/scenarios"
)

// TestEveryPropertyHasAChecker: every property of every scenario is judged
// by a checker of package models, so that fencecheck recomputes it offline
// from the history (and the data its header carries) as the run does; a
// server read a scenario makes is for one of its own properties.
func TestEveryPropertyHasAChecker(t *testing.T) {
	for _, s := range scenarios.All() {
		for _, p := range s.Properties {
			if _, ok := models.Lookup(p.Checker); !ok {
				t.Errorf("%s: property %q has no checker in package models", s.Name, p.Checker)
			}
		}
		for name := range s.Reads {
			found := false
			for _, p := range s.Properties {
				found = found || p.Checker == name
			}
			if !found {
				t.Errorf("%s: reads the servers for %q, which is not one of its properties", s.Name, name)
			}
		}
	}
}
