package scenarios

import (
	"encoding/json"

	"github.com/coordtorture/coordtorture/models"
)

// propertyResultJSON is how report.json states a property: its verdict, the
// same on every surface (terminal, summary, HTML, JUnit, fencecheck), at the
// top and in its result; the checker's own verdict (FAIL for a HAZARD) is
// checker_verdict.
type propertyResultJSON struct {
	Checker string     `json:"checker"`
	Expect  string     `json:"expect"`
	Verdict Verdict    `json:"verdict"`
	Result  resultJSON `json:"result"`
}

type resultJSON struct {
	models.Result
	// Verdict shadows the checker's verdict with the property's.
	Verdict        Verdict         `json:"verdict"`
	CheckerVerdict *models.Verdict `json:"checker_verdict,omitempty"`
}

// MarshalJSON writes the property's verdict, not the checker's, as the
// result's verdict, and the checker's as checker_verdict.
func (p PropertyResult) MarshalJSON() ([]byte, error) {
	cv := p.Result.Verdict
	return json.Marshal(propertyResultJSON{Checker: p.Checker, Expect: p.Expect, Verdict: p.Verdict,
		Result: resultJSON{Result: p.Result, Verdict: p.Verdict, CheckerVerdict: &cv}})
}

// UnmarshalJSON reads what MarshalJSON writes, and the reports written
// before checker_verdict existed (whose result verdict was the checker's).
func (p *PropertyResult) UnmarshalJSON(b []byte) error {
	var j propertyResultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = PropertyResult{Checker: j.Checker, Expect: j.Expect, Verdict: j.Verdict, Result: j.Result.Result}
	switch {
	case j.Result.CheckerVerdict != nil:
		p.Result.Verdict = *j.Result.CheckerVerdict
	case j.Result.Verdict == Unknown:
		p.Result.Verdict = models.Unknown
	case j.Result.Verdict == Fail || j.Result.Verdict == Hazard:
		p.Result.Verdict = models.Fail
	}
	return nil
}
