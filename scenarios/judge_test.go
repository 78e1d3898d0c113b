package scenarios

import (
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/models"
)

// HAZARD is decided per violation: only violations of the hazard's kinds,
// complete after a fault with a proven effect began, are the hazard; anything
// else is FAIL.
func TestJudgeViolations(t *testing.T) {
	// The kill began at 1s; the restart at 1.3s proved the data lost.
	fault := []models.Effect{{From: int64(time.Second), At: int64(1300 * time.Millisecond), What: "dataset lost"}}
	at := func(d time.Duration) int64 { return int64(d) }
	res := func(kinds map[string]int, earliest map[string]int64, ev ...models.Evidence) models.Result {
		n := 0
		for _, c := range kinds {
			n += c
		}
		return models.Result{Verdict: models.Fail, Kinds: kinds, Earliest: earliest, Violations: n, Evidence: ev}
	}
	reused := models.Evidence{Kind: models.KindTokenReused, Msg: "token 7 reused"}
	stale := models.Evidence{Kind: models.KindStaleWrite, Msg: "stale write accepted"}
	may := Property{Checker: "fenced-resource", Expect: MayHazard}
	cases := []struct {
		name string
		p    Property
		r    models.Result
		log  []models.Effect
		want Verdict
	}{
		{"reused token after the fault is the hazard", may,
			res(map[string]int{models.KindTokenReused: 3}, map[string]int64{models.KindTokenReused: at(2 * time.Second)}, reused), fault, Hazard},
		{"a stale write accepted is never the hazard", may,
			res(map[string]int{models.KindTokenReused: 2279, models.KindStaleWrite: 1},
				map[string]int64{models.KindTokenReused: at(2 * time.Second), models.KindStaleWrite: at(3 * time.Second)}, reused, reused, stale), fault, Fail},
		{"a violation complete before the first fault is not its doing", may,
			res(map[string]int{models.KindTokenReused: 1}, map[string]int64{models.KindTokenReused: at(500 * time.Millisecond)}, reused), fault, Fail},
		{"no fault was seen to have an effect", may,
			res(map[string]int{models.KindTokenReused: 1}, map[string]int64{models.KindTokenReused: at(2 * time.Second)}, reused),
			nil, Fail},
		{"the earliest effect's fault counts", may,
			res(map[string]int{models.KindTokenReused: 1}, map[string]int64{models.KindTokenReused: at(1200 * time.Millisecond)}, reused),
			append([]models.Effect{{From: int64(3 * time.Second), At: int64(3 * time.Second)}}, fault...), Hazard},
		{"must hold", Property{Checker: "fenced-resource"},
			res(map[string]int{models.KindTokenReused: 1}, map[string]int64{models.KindTokenReused: at(2 * time.Second)}, reused), fault, Fail},
		{"a custom check without kinds", may, models.Result{Verdict: models.Fail, Violations: 1}, fault, Fail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			if got := judgeViolations(c.p, &r, c.log); got != c.want {
				t.Fatalf("verdict %s, want %s (summary %q)", got, c.want, r.Summary)
			}
			if c.want == Fail && len(r.Evidence) > 0 && r.Evidence[0].Hazard {
				t.Fatalf("a FAIL lists hazard evidence first: %+v", r.Evidence)
			}
		})
	}
	// The FAIL-class evidence comes first, and the summary splits the kinds.
	r := res(map[string]int{models.KindTokenReused: 2279, models.KindStaleWrite: 1},
		map[string]int64{models.KindTokenReused: at(2 * time.Second), models.KindStaleWrite: at(3 * time.Second)}, reused, reused, stale)
	judgeViolations(may, &r, fault)
	if r.Evidence[0].Kind != models.KindStaleWrite || !r.Evidence[1].Hazard {
		t.Fatalf("evidence order %+v", r.Evidence)
	}
	want := "2280 violation(s): 1 stale-write (FAIL), 2279 token-reused (hazard); first: stale write accepted"
	if r.Summary != want {
		t.Fatalf("summary %q, want %q", r.Summary, want)
	}
}
