package reports

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Bounds on the HTML report, so that a page stays a few megabytes whatever
// the length of the histories (its size grows with the number of runs past
// 66: see MaxPageBars).
const (
	// MaxTimelineBars is the most bars (holds and operations) one scenario's
	// timeline draws. Beyond it, bars of one lane closer than a growing
	// distance are merged into one, and the page says so.
	MaxTimelineBars = 3000
	// MaxPageBars bounds the bars of all timelines of a page together: a run
	// of many scenarios gets fewer bars per scenario, but at least 300, so
	// the bound holds up to 66 runs (the default suite's 32: its page near
	// 3.5 MB at about 170 bytes a bar, its runs/latest under 20 MB with its
	// histories) and beyond that a page has up to 300 bars a run: 113 runs
	// (make torture-full) up to 33,900 bars, about 6 MB. A budget of 60000
	// made pages of 12 MB.
	MaxPageBars = 20000
	// MaxTimelineLanes is the most processes a timeline draws a lane for.
	MaxTimelineLanes = 64
	// MaxEvents is the most nemesis events a timeline draws and lists.
	MaxEvents = 500
	// MaxEvidence is the most evidence entries a property lists (and marks
	// on the timeline).
	MaxEvidence = 20
	// MaxEvidenceOps is the most operations of one evidence entry marked on
	// the timeline.
	MaxEvidenceOps = 20
	// maxEvidenceText bounds the text of one evidence entry, in bytes.
	maxEvidenceText = 8000
)

//go:embed report.html.tmpl
var pageSource string

var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"f":      fmtCoord,
	"fx":     fmtPlot,
	"vcl":    verdictClass,
	"isub":   func(a, b int) int { return a - b },
	"add":    func(a, b float64) float64 { return a + b },
	"sub":    func(a, b float64) float64 { return a - b },
	"plural": plural,
}).Parse(pageSource))

// VisualizationFile is the file name, inside a run directory, of the
// porcupine visualization of an outcome's property (written by WriteDir when
// the checker's Result carries one, and linked from index.html).
func VisualizationFile(o *scenarios.Outcome, checker string) string {
	return "viz/" + fileSafe(strings.ReplaceAll(o.Scenario, "/", "__")+"."+o.Impl+"."+o.Build+"."+checker) + ".html"
}

// fileSafe replaces every byte that is not a letter, digit, '.', '_' or '-'
// with '_', so that a name is a safe file name and relative URL.
func fileSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] == '.' {
		return "_" + string(b)
	}
	return string(b)
}

// WriteHTML writes index.html: one self-contained page (inline CSS, SVG and
// a little script; no external resource) with the verdict table, a timeline
// of every scenario (lock holders per process, fault windows, violations),
// latency histograms per operation kind, and links to the histories and
// porcupine visualizations that WriteDir writes next to it. Every string from
// the run is escaped.
func WriteHTML(w io.Writer, r *Run) error {
	return pageTemplate.Execute(w, buildPage(r))
}

// page is what the template renders.
type page struct {
	Title   string
	Started string
	Command string
	// Overall is the run's verdict (Run.Overall), the one that sets the
	// exit status; All the worst of every outcome, comparison included.
	Overall, All scenarios.Verdict
	Exit         int
	Counts       []verdictCount // of the outcomes that set the verdict
	CompCounts   []verdictCount // of the comparison's outcomes
	Grid         *grid
	// UnderTest are the outcomes that set the verdict, Comparison the
	// others (peers and mutants beside prim); each in run order.
	UnderTest  []*pageOutcome
	Comparison []*pageOutcome
	CompImpls  []string       // the comparison's implementations
	Outcomes   []*pageOutcome // all, in run order
}

type verdictCount struct {
	Verdict scenarios.Verdict
	N       int
}

// grid is the scenario × implementation table at the top of the page.
type grid struct {
	Impls []gridImpl
	Rows  []gridRow
	// Comparison is the number of comparison columns (the last ones).
	Comparison int
}

type gridImpl struct {
	Name       string
	Comparison bool
}

type gridRow struct {
	Scenario string
	Cells    []gridCell
}

// gridCell is the worst verdict of one scenario × implementation (over
// servers), linking to the section of the first outcome with it; Runs is 0
// when the implementation did not run the scenario.
type gridCell struct {
	Verdict    scenarios.Verdict
	Href       string
	Title      string
	Runs       int
	NA         int // properties with nothing to check, over the runs
	Comparison bool
}

type pageOutcome struct {
	ID         string
	Comparison bool // a peer's or mutant's run beside prim: does not set the verdict
	NA         int  // properties with nothing to check
	// PropLine sums up the properties of a run that passed (their list
	// starts collapsed), N/A ones with their reasons.
	PropLine string
	Scenario string
	Impl     string
	Build    string
	Seed     int64
	Clients  int
	Duration string
	Ops      int
	Verdict  scenarios.Verdict
	Error    string
	History  string
	Props    []pageProp
	Timeline *timeline
	Events   []pageEvent
	More     int // events not listed
	Hists    []*histogram
	Problem  string // the history could not be read
}

type pageProp struct {
	Checker    string
	Expect     string
	Verdict    scenarios.Verdict
	Summary    string
	Violations int
	Elapsed    string
	Viz        string
	Evidence   []pageEvidence
	Omitted    int // evidence entries not shown
}

type pageEvidence struct {
	ID     string // "E3"
	Anchor string // element id
	Text   string
	Marked bool // drawn on the timeline
}

type pageEvent struct {
	ID    string
	At    string
	Name  string
	Err   string
	Until string // the heal that ended the window, if any
	// Effect is what the event proved the fault did (a hazard's
	// precondition), if anything.
	Effect string
}

func buildPage(r *Run) *page {
	p := &page{Command: r.Command, Overall: r.Overall(), All: r.Verdict()}
	p.Exit = p.Overall.ExitStatus()
	if !r.Started.IsZero() {
		p.Started = r.Started.Format(time.RFC3339)
	}
	p.Title = fmt.Sprintf("coordtorture %s", p.Overall)
	if p.Started != "" {
		p.Title += " · " + p.Started
	}
	// The implementations that do not decide Overall (beside prim, the peers
	// and mutants) are a comparison.
	budget := MaxTimelineBars
	if n := len(r.Outcomes); n > 0 && MaxPageBars/n < budget {
		budget = max(300, MaxPageBars/n)
	}
	count := map[scenarios.Verdict]int{}
	compCount := map[scenarios.Verdict]int{}
	for i, o := range r.Outcomes {
		po := buildOutcome(i, o, budget)
		po.Comparison = !r.Decides(o.Impl)
		p.Outcomes = append(p.Outcomes, po)
		if po.Comparison {
			p.Comparison = append(p.Comparison, po)
			compCount[o.Verdict]++
		} else {
			p.UnderTest = append(p.UnderTest, po)
			count[o.Verdict]++
		}
	}
	p.Counts, p.CompCounts = counts(count), counts(compCount)
	p.Grid = buildGrid(p.Outcomes)
	for _, im := range p.Grid.Impls {
		if im.Comparison {
			p.CompImpls = append(p.CompImpls, im.Name)
		}
	}
	return p
}

// ies is the ending of "property" for n of them.
func ies(n int) string {
	if n == 1 {
		return "y"
	}
	return "ies"
}

func counts(m map[scenarios.Verdict]int) []verdictCount {
	var out []verdictCount
	for _, v := range []scenarios.Verdict{scenarios.Fail, scenarios.Unknown, scenarios.Hazard, scenarios.Pass, scenarios.NA} {
		if m[v] > 0 {
			out = append(out, verdictCount{v, m[v]})
		}
	}
	return out
}

// buildGrid lays the outcomes out as scenarios × implementations: the
// implementations that set the verdict first, the comparison's after.
func buildGrid(pos []*pageOutcome) *grid {
	g := &grid{}
	col := map[string]int{}
	row := map[string]int{}
	for pass := 0; pass < 2; pass++ {
		for _, po := range pos {
			if _, ok := col[po.Impl]; ok || po.Comparison != (pass == 1) {
				continue
			}
			col[po.Impl] = len(g.Impls)
			g.Impls = append(g.Impls, gridImpl{Name: po.Impl, Comparison: po.Comparison})
			if po.Comparison {
				g.Comparison++
			}
		}
	}
	for _, po := range pos {
		if _, ok := row[po.Scenario]; !ok {
			row[po.Scenario] = len(g.Rows)
			g.Rows = append(g.Rows, gridRow{Scenario: po.Scenario, Cells: make([]gridCell, len(g.Impls))})
		}
		c := &g.Rows[row[po.Scenario]].Cells[col[po.Impl]]
		c.Comparison = po.Comparison
		if c.Runs == 0 || scenarios.Worst(c.Verdict, po.Verdict) != c.Verdict {
			c.Verdict, c.Href = po.Verdict, "#"+po.ID
		}
		c.Runs++
		c.NA += po.NA
	}
	for _, r := range g.Rows {
		for i := range r.Cells {
			c := &r.Cells[i]
			if c.Runs == 0 {
				continue
			}
			c.Title = string(c.Verdict)
			if c.Runs > 1 {
				c.Title += fmt.Sprintf(", the worst of %d runs", c.Runs)
			}
			if c.NA > 0 {
				c.Title += fmt.Sprintf("; %d propert%s with nothing to check (N/A)", c.NA, ies(c.NA))
			}
			if c.Comparison {
				c.Title += "; comparison: does not set the verdict"
			}
		}
	}
	return g
}

func buildOutcome(i int, o *scenarios.Outcome, budget int) *pageOutcome {
	po := &pageOutcome{ID: fmt.Sprintf("s%d", i+1), Scenario: o.Scenario, Impl: o.Impl, Build: o.Build,
		Seed: o.Seed, Clients: o.Clients, Ops: o.Ops, Verdict: o.Verdict, Error: o.Error,
		History: HistoryFile(o)}
	if o.Duration > 0 {
		po.Duration = o.Duration.String()
	}
	h, err := history.New(o.Records)
	if err != nil {
		po.Problem = "the history is malformed, so it is not drawn: " + err.Error()
		h = &history.History{}
	}
	nev := 0
	for _, pr := range o.Results {
		pp := pageProp{Checker: pr.Checker, Expect: pr.Expect, Verdict: pr.Verdict, Summary: pr.Result.Summary,
			Violations: pr.Result.Violations, Elapsed: pr.Result.Elapsed.Round(time.Millisecond).String()}
		if pr.Result.Visualization != nil {
			pp.Viz = VisualizationFile(o, pr.Checker)
		}
		if pr.Verdict != scenarios.Pass {
			for k, e := range pr.Result.Evidence {
				if k == MaxEvidence {
					pp.Omitted = len(pr.Result.Evidence) - k
					break
				}
				nev++
				text := EvidenceText(e)
				if len(text) > maxEvidenceText {
					text = text[:maxEvidenceText] + " …"
				}
				pp.Evidence = append(pp.Evidence, pageEvidence{ID: fmt.Sprintf("E%d", nev),
					Anchor: fmt.Sprintf("%s-e%d", po.ID, nev), Text: text, Marked: len(e.Ops) > 0})
			}
		}
		if pr.Verdict == scenarios.NA {
			po.NA++
		}
		po.Props = append(po.Props, pp)
	}
	held := len(o.Results) - po.NA
	po.PropLine = fmt.Sprintf("%d propert%s held", held, ies(held))
	if po.NA > 0 {
		var na []string
		for _, pr := range o.Results {
			if pr.Verdict == scenarios.NA {
				na = append(na, pr.Checker+": "+pr.Result.Summary)
			}
		}
		po.PropLine += fmt.Sprintf(", %d N/A (%s)", po.NA, strings.Join(na, "; "))
	}
	tl, evs, more := buildTimeline(po.ID, o, h, budget)
	po.Timeline, po.Events, po.More = tl, evs, more
	po.Hists = buildHistograms(h)
	return po
}

func verdictClass(v scenarios.Verdict) string {
	switch v {
	case scenarios.Pass:
		return "pass"
	case scenarios.Hazard:
		return "hazard"
	case scenarios.Fail:
		return "fail"
	case scenarios.NA:
		return "na"
	}
	return "unknown"
}

// fmtCoord formats an SVG coordinate with one decimal.
func fmtCoord(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0")
}

// fmtPlot formats an x coordinate inside a zoomable timeline with three
// decimals: the script zooms in up to 20000 times.
func fmtPlot(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// fmtNs formats a history time or a duration in nanoseconds for humans.
func fmtNs(ns int64) string {
	if ns == history.Never {
		return "never"
	}
	d := time.Duration(ns)
	a := d
	if a < 0 {
		a = -a
	}
	switch {
	case a >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + "s"
	case a >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms"
	case a >= time.Microsecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + "µs"
	}
	return strconv.FormatInt(ns, 10) + "ns"
}

// niceStep is a 1, 2 or 5 × 10^k step that divides span into at most n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// fmtTick formats a tick at t ns on an axis with the given step.
func fmtTick(t, step float64) string {
	if t == 0 {
		return "0"
	}
	units := []struct {
		ns   float64
		name string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}, {1, "ns"}}
	for i, u := range units {
		if step >= u.ns || u.ns == 1 {
			if i > 0 && t >= units[i-1].ns {
				// 1000ms is 1s, 1500ms 1.5s.
				return strconv.FormatFloat(t/units[i-1].ns, 'f', -1, 64) + units[i-1].name
			}
			v := t / u.ns
			dec := 0
			for s := step / u.ns; s < 1 && dec < 3; s *= 10 {
				dec++
			}
			return strconv.FormatFloat(v, 'f', dec, 64) + u.name
		}
	}
	return ""
}

var acquires = map[string]bool{
	history.FAcquire: true, history.FAcquireWait: true,
	history.FAcquireRead: true, history.FAcquireReadWait: true,
	history.FAcquireWrite: true, history.FAcquireWriteWait: true,
	history.FSemAcquire: true, history.FSemAcquireWait: true,
}
