package scenarios

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/models"
)

// TestPropertyResultJSON: report.json states a property's verdict (HAZARD)
// both at the top and in its result, so no reader sees the checker's FAIL as
// the verdict; the checker's is checker_verdict, and it reads back.
func TestPropertyResultJSON(t *testing.T) {
	p := PropertyResult{Checker: "token-order", Expect: "may show hazard", Verdict: Hazard,
		Result: models.Result{Checker: "token-order", Verdict: models.Fail, Summary: "1 violation(s)", Violations: 1}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Count(s, `"verdict":"HAZARD"`) != 2 || !strings.Contains(s, `"checker_verdict":"FAIL"`) || strings.Contains(s, `"verdict":"FAIL"`) {
		t.Fatalf("%s", s)
	}
	var back PropertyResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Verdict != Hazard || back.Result.Verdict != models.Fail || back.Result.Summary != p.Result.Summary || back.Result.Violations != 1 {
		t.Fatalf("%+v", back)
	}
	// A report written before: the result's verdict was the checker's.
	old := `{"checker":"exclusion","expect":"must hold","verdict":"UNKNOWN","result":{"checker":"exclusion","verdict":"UNKNOWN","summary":"undecided"}}`
	if err := json.Unmarshal([]byte(old), &back); err != nil || back.Verdict != Unknown || back.Result.Verdict != models.Unknown {
		t.Fatalf("%v %+v", err, back)
	}
}
