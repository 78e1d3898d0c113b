package scenarios

import (
	"context"
	"strings"
	"testing"
)

// TestCanaryNotPlantedIsUnknown: a kill whose canary could not be planted
// before it cannot prove or disprove a lost dataset; the restart's event
// fails (the run is UNKNOWN) instead of passing silently, since a loss that
// happened unproven would make later violations FAIL (issue 30, rule 2: no
// horizon after a loss that ended, so an unproven second loss turned a
// restart's over-admission into a FAIL).
func TestCanaryNotPlantedIsUnknown(t *testing.T) {
	err := checkCanary(context.Background(), nil, nil, -1, "the restart")
	if err == nil || !strings.Contains(err.Error(), "canary") {
		t.Fatalf("checkCanary without a planted canary: %v, want an error naming the canary", err)
	}
}
