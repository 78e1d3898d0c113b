// Package reports renders scenario outcomes: a text summary, JSON, JUnit XML
// (one test case per scenario × property), a self-contained HTML page (verdict
// table, per-scenario timelines of lock holders and faults, latency
// histograms), porcupine's visualizations, and every history as gzip-compressed
// JSONL that cmd/fencecheck can check again offline.
package reports

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Run is one coordtorture run: its settings and its outcomes.
type Run struct {
	Started  time.Time            `json:"started"`
	Command  string               `json:"command"`
	Outcomes []*scenarios.Outcome `json:"outcomes"`
	// DecidedBy, when not nil, names the implementations whose verdicts
	// decide the overall verdict, whatever ran: a replay keeps the rule of
	// the run it replays. Nil: Deciding's rule. report.json states it as
	// "overall_from", which UnmarshalJSON reads back into it.
	DecidedBy []string `json:"-"`
	// Interrupted reports a run cut short (SIGINT, SIGTERM): its overall
	// verdict is UNKNOWN at best, since scenarios did not run.
	Interrupted bool `json:"interrupted,omitempty"`
}

// MarshalJSON writes the run with its overall verdict ("overall", the one
// that sets the exit status), the implementations whose verdicts decide it
// ("overall_from") and those shown for comparison ("comparison").
func (r *Run) MarshalJSON() ([]byte, error) {
	type plain Run
	return json.Marshal(struct {
		*plain
		Overall     scenarios.Verdict `json:"overall"`
		OverallFrom []string          `json:"overall_from"`
		Comparison  []string          `json:"comparison,omitempty"`
	}{(*plain)(r), r.Overall(), r.Deciding(), r.Comparison()})
}

// UnmarshalJSON reads a run MarshalJSON wrote: its "overall_from" becomes
// DecidedBy, so a run read back (by replay) keeps the rule it stated (a
// replay --all of an --impl all run: prim decides though only peers ran).
// Without "overall_from" (older reports) DecidedBy stays nil: Deciding's
// rule.
func (r *Run) UnmarshalJSON(b []byte) error {
	type plain Run
	var v struct {
		*plain
		OverallFrom []string `json:"overall_from"`
	}
	v.plain = (*plain)(r)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.OverallFrom != nil {
		r.DecidedBy = v.OverallFrom
	}
	return nil
}

// Verdict is the worst verdict of every outcome of the run, the comparison
// implementations' included; Overall is the run's verdict.
func (r *Run) Verdict() scenarios.Verdict { return r.VerdictOf("") }

// VerdictOf is the worst verdict of one implementation's outcomes ("": all).
func (r *Run) VerdictOf(impl string) scenarios.Verdict {
	var vs []scenarios.Verdict
	for _, o := range r.Outcomes {
		if impl == "" || o.Impl == impl {
			vs = append(vs, o.Verdict)
		}
	}
	return scenarios.Worst(vs...)
}

// Impls lists the implementations of the run's outcomes, in order of first
// appearance.
func (r *Run) Impls() []string {
	var impls []string
	for _, o := range r.Outcomes {
		if !slices.Contains(impls, o.Impl) {
			impls = append(impls, o.Impl)
		}
	}
	return impls
}

// Deciding lists the implementations whose verdicts decide the overall
// verdict: DecidedBy when set, else prim alone when prim ran beside others
// (--impl all: the peer libraries and the mutants run for comparison), else
// every implementation of the run.
func (r *Run) Deciding() []string { return models.Deciding(r.DecidedBy, r.Impls()) }

// Comparison lists the implementations shown beside prim for comparison,
// whose verdicts do not set the overall verdict.
func (r *Run) Comparison() []string {
	d := r.Deciding()
	var cmp []string
	for _, impl := range r.Impls() {
		if !slices.Contains(d, impl) {
			cmp = append(cmp, impl)
		}
	}
	return cmp
}

// Decides reports whether impl's verdicts count towards the overall verdict.
func (r *Run) Decides(impl string) bool { return slices.Contains(r.Deciding(), impl) }

// Overall is the run's one verdict, the one every surface states and that
// sets the exit status (Overall().ExitStatus()): the worst verdict of the
// deciding implementations' outcomes (Deciding), UNKNOWN at best when the
// run was interrupted. An N/A outcome (a server without a feature the
// scenario requires: Outcome.Unsupported) leaves the verdict to the others,
// as an N/A property does in a run (models.Overall): a matrix over builds
// with and without hash-field expiry PASSes; a run in which every outcome
// was N/A checked nothing, which is UNKNOWN, never PASS.
func (r *Run) Overall() scenarios.Verdict {
	var vs []scenarios.Verdict
	if r.Interrupted {
		vs = append(vs, scenarios.Unknown)
	}
	for _, o := range r.Outcomes {
		if r.Decides(o.Impl) {
			vs = append(vs, o.Verdict)
		}
	}
	return models.Overall(vs...)
}

// CheckedNothing reports whether every outcome of the deciding
// implementations was N/A (Outcome.Unsupported: the server lacks what the
// scenario needs): the run checked nothing, and Overall is UNKNOWN.
func (r *Run) CheckedNothing() bool {
	n := 0
	for _, o := range r.Outcomes {
		if !r.Decides(o.Impl) {
			continue
		}
		if o.Verdict != scenarios.NA {
			return false
		}
		n++
	}
	return n > 0
}

// HistoryFile is the file name of an outcome's history inside a run directory
// (gzip-compressed JSONL: history.WriteFile).
func HistoryFile(o *scenarios.Outcome) string {
	return filepath.Join("histories", models.HistoryName(o.Scenario, o.Impl, o.Build))
}

// TerminalEvidence is how many evidence entries of a property the terminal
// summary prints (the deciding implementations' only); summary.txt has all
// the run kept.
const TerminalEvidence = 2

// terminalOps is how many operations of one evidence entry the terminal
// summary prints.
const terminalOps = 6

// WriteSummary writes the full text summary, as summary.txt has it: the
// verdict table, the uncertain outcomes, the faults' effects, every evidence
// entry the checkers kept, and the overall verdict last.
func WriteSummary(w io.Writer, r *Run) error { return writeSummary(w, r, false) }

// WriteTerminalSummary writes the summary for a terminal: the same sections
// with the evidence capped (TerminalEvidence entries a property for the
// deciding implementations, the one-line verdict for the comparison ones)
// and the verdict table and the overall verdict last, where a reader's eye
// ends up; summary.txt has the full text.
func WriteTerminalSummary(w io.Writer, r *Run) error { return writeSummary(w, r, true) }

func writeSummary(w io.Writer, r *Run, terminal bool) error {
	if !terminal {
		if err := writeTable(w, r, "below"); err != nil {
			return err
		}
	}
	// On a terminal, the comparison's uncertain outcomes and fault effects
	// are left to summary.txt: with --impl all they would double the page.
	hidden := 0
	shown := func(o *scenarios.Outcome) bool {
		if terminal && !r.Decides(o.Impl) {
			hidden++
			return false
		}
		return true
	}
	var unc []string
	for _, o := range r.Outcomes {
		if u := o.Uncertain; u.Info > 0 && shown(o) {
			acq := fmt.Sprintf("%d of them acquisitions", u.InfoAcquisitions)
			if u.InfoAcquisitions == 1 {
				acq = "1 of them an acquisition"
			}
			line := fmt.Sprintf("  %s [%s]: %s, %s", o.Scenario, o.Impl, plural(u.Info, "info operation"), acq)
			if u.Executed >= 0 && u.InfoAcquisitions > 0 {
				line += fmt.Sprintf(", %d of which took a token (executed)", u.Executed)
			}
			if u.Observed >= 0 && u.InfoAcquisitions > 0 {
				line += fmt.Sprintf(", %d seen holding the lease by the sampler", u.Observed)
			}
			unc = append(unc, line)
		}
	}
	if len(unc) > 0 {
		fmt.Fprintf(w, "\nuncertain outcomes:\n%s\n", strings.Join(unc, "\n"))
	}
	var ctr []string
	for _, o := range r.Outcomes {
		if len(o.Counters) == 0 || !shown(o) {
			continue
		}
		names := make([]string, 0, len(o.Counters))
		for n := range o.Counters {
			names = append(names, n)
		}
		sort.Strings(names)
		var kv []string
		for _, n := range names {
			kv = append(kv, fmt.Sprintf("%s %d", n, o.Counters[n]))
		}
		ctr = append(ctr, fmt.Sprintf("  %s [%s]: %s", o.Scenario, o.Impl, strings.Join(kv, ", ")))
	}
	if len(ctr) > 0 {
		fmt.Fprintf(w, "\nimplementation counters (its own telemetry, read at the end of the workload):\n%s\n", strings.Join(ctr, "\n"))
	}
	var hz []string
	for _, o := range r.Outcomes {
		if o.Hazard == "" || !shown(o) {
			continue
		}
		line := fmt.Sprintf("  %s [%s]: hazard %s", o.Scenario, o.Impl, hazardWords[o.Hazard])
		for _, ef := range o.Effects {
			line += "\n    " + ef
		}
		hz = append(hz, line)
	}
	if len(hz) > 0 {
		fmt.Fprintf(w, "\nfault effects (what the hazard scenarios' faults were seen to do):\n%s\n", strings.Join(hz, "\n"))
	}
	if hidden > 0 {
		fmt.Fprintln(w, "\n(summary.txt also has the uncertain outcomes and fault effects of the comparison's runs)")
	}
	for _, o := range r.Outcomes {
		decides := r.Decides(o.Impl)
		role := ""
		if !decides {
			role = " (comparison)"
		}
		if o.Error != "" {
			text := o.Error
			if terminal {
				text = firstLines(text, 8)
			}
			what := "the run went wrong"
			if o.NotRun() {
				what = "not run" // too short for what it states against the ttl (Scenario.Needs)
			}
			fmt.Fprintf(w, "\n%s %s [%s]%s (seed %d): %s:\n  %s\n", o.Verdict, o.Scenario, o.Impl, role, o.Seed, what,
				strings.ReplaceAll(text, "\n", "\n  "))
		}
		if o.Unsupported != "" {
			// One line: every property is N/A for the same reason.
			fmt.Fprintf(w, "\n%s %s [%s]%s on %s: not run: %s\n", o.Verdict, o.Scenario, o.Impl, role, o.Build, o.Unsupported)
			continue
		}
		for _, p := range o.Results {
			if p.Verdict == scenarios.Pass {
				continue
			}
			ev := p.Result.Evidence
			limit := len(ev)
			if terminal {
				limit = TerminalEvidence
				if !decides {
					limit = 0
				}
			}
			shown := min(limit, len(ev))
			sum := p.Result.Summary
			if before, _, ok := strings.Cut(sum, "; first: "); ok && shown > 0 {
				sum = before // the first entry follows
			}
			fmt.Fprintf(w, "\n%s %s [%s]%s %s (%s, seed %d): %s\n", p.Verdict, o.Scenario, o.Impl, role, p.Checker, p.Expect, o.Seed, sum)
			for _, e := range ev[:shown] {
				text := evidenceText(e, terminal)
				fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(text, "\n", "\n  "))
			}
			if more := moreText(p.Result, shown, terminal); more != "" {
				fmt.Fprintf(w, "  %s\n", more)
			}
		}
	}
	if terminal {
		fmt.Fprintln(w)
		if err := writeTable(w, r, "above"); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	r.writeOverall(w)
	return nil
}

// moreText counts what the summary did not print of a property's
// evidence: every violation the checker found (Result.Violations), not only
// the entries it kept.
func moreText(res models.Result, shown int, terminal bool) string {
	kept := len(res.Evidence)
	total := max(res.Violations, kept)
	more := total - shown
	if more <= 0 {
		return ""
	}
	noun := "more " + pluralWord(more, "violation")
	if res.Violations == 0 {
		noun = "more " + pluralWord(more, "entry")
	}
	switch {
	case terminal && shown == 0 && kept == total:
		return "(its evidence is in summary.txt)"
	case terminal && shown == 0:
		return fmt.Sprintf("(summary.txt has the evidence of the first %d of the %d)", kept, total)
	case terminal && kept > shown && kept == total:
		return fmt.Sprintf("… %d %s (summary.txt lists them)", more, noun)
	case terminal && kept > shown:
		return fmt.Sprintf("… %d %s (summary.txt lists the first %d of the %d)", more, noun, kept, total)
	case terminal:
		return fmt.Sprintf("… %d %s", more, noun)
	}
	return fmt.Sprintf("… %d %s (the checker keeps the first %d as evidence; fencecheck on the history finds them all)", more, noun, kept)
}

// writeTable writes the verdict table: one line per scenario run, with the
// completed acquisitions and accepted writes per second (not the attempts:
// a contended try-acquire is an operation too, counted in OPS).
func writeTable(w io.Writer, r *Run, errorsWhere string) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tIMPL\tSERVER\tVERDICT\tACQ/S\tWRITES/S\tOPS\tPROPERTIES")
	for _, o := range r.Outcomes {
		var ps []string
		if note := NoHazardNote(o); note != "" {
			ps = append(ps, "("+note+")")
		}
		for _, p := range o.Results {
			ps = append(ps, fmt.Sprintf("%s=%s", p.Checker, p.Verdict))
		}
		if o.Error != "" {
			ps = append(ps, "(the run went wrong: see "+errorsWhere+")")
			if len(o.Results) == 0 {
				ps[len(ps)-1] = "(could not run: see " + errorsWhere + ")"
			}
		}
		acq, writes := "-", "-"
		if c := CountCompleted(o); c.Acquisitions+c.Writes > 0 && o.Duration > 0 {
			acq, writes = rate(c.Acquisitions, o.Duration), rate(c.Writes, o.Duration)
		} else if c.Grants > 0 && o.Duration > 0 {
			acq = rate(c.Grants, o.Duration) // a rate limiter: its grants (see the legend)
		} else if c.CountDowns > 0 && o.Duration > 0 {
			acq = rate(c.CountDowns, o.Duration) // a latch: its count-downs (see the legend)
		}
		impl := o.Impl
		if !r.Decides(o.Impl) {
			impl += "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", o.Scenario, impl, o.Build, o.Verdict, acq, writes, o.Ops, strings.Join(ps, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	legend := "ACQ/S, WRITES/S: acquisitions that got the lock (for a rate limiter: requests granted; for a semaphore: permits; for a latch: count-downs counted) and writes the resource accepted, per second; OPS: every operation recorded, refused attempts included"
	if len(r.Comparison()) > 0 {
		legend += "\n*: shown for comparison; its verdicts do not set the overall verdict"
	}
	_, err := fmt.Fprintln(w, legend)
	return err
}

func rate(n int, d time.Duration) string {
	v := float64(n) / d.Seconds()
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// Completed counts a run's completed operations by kind.
type Completed struct {
	// Acquisitions that returned the lock, lease or permit (ok).
	Acquisitions int
	// Writes the protected resource accepted (ok).
	Writes int
	// Grants are rate-limit requests granted (ok allow and allow_wait).
	Grants int
	// Permits are the semaphore permits granted (ok sem_acquire and
	// sem_acquire_wait), counted among the Acquisitions too.
	Permits int
	// CountDowns are latch signals counted (ok latch_count_down with a
	// remaining count); Opened, latch waits answered true.
	CountDowns, Opened int
	// WriteLeases are the acquisitions that were read-write write leases
	// (acquire_write, acquire_write_wait); the other acquisitions of a
	// read-write run are read leases.
	WriteLeases int
	// rw says the run acquired read-write leases.
	rw bool
}

// CountCompleted counts the completed acquisitions and accepted writes of
// an outcome's history (zero when the outcome was read from report.json,
// which does not carry the records).
func CountCompleted(o *scenarios.Outcome) Completed {
	var c Completed
	for i := range o.Records {
		op := &o.Records[i]
		if op.Type != history.OK {
			continue
		}
		switch {
		case op.F == history.FWrite:
			c.Writes++
		case op.F == history.FAllow || op.F == history.FAllowWait:
			c.Grants++
		case op.F == history.FLatchCountDown && op.Count >= 0:
			c.CountDowns++
		case op.F == history.FLatchWait && op.Value == history.ValueTrue:
			c.Opened++
		case strings.HasPrefix(op.F, "sem_acquire"):
			c.Acquisitions++
			c.Permits++
		case strings.HasPrefix(op.F, "acquire"):
			c.Acquisitions++
			switch op.F {
			case history.FAcquireWrite, history.FAcquireWriteWait:
				c.WriteLeases++
				c.rw = true
			case history.FAcquireRead, history.FAcquireReadWait:
				c.rw = true
			}
		}
	}
	return c
}

// String is "22 acquisitions, 18 writes", or for a rate limiter's run
// "310 grants", for a semaphore's "120 permits granted", for a latch's
// "420 count-downs, 310 waits opened", or for a read-write lease run without a
// resource "694 acquisitions: 652 read, 42 write leases".
func (c Completed) String() string {
	if c.Grants > 0 && c.Acquisitions+c.Writes == 0 {
		return plural(c.Grants, "grant")
	}
	if c.Permits > 0 && c.Permits == c.Acquisitions && c.Writes == 0 {
		return plural(c.Permits, "permit") + " granted"
	}
	if c.CountDowns+c.Opened > 0 && c.Acquisitions+c.Writes+c.Grants == 0 {
		return plural(c.CountDowns, "count-down") + ", " + plural(c.Opened, "wait") + " opened"
	}
	if c.rw && c.Writes == 0 {
		return fmt.Sprintf("%s: %d read, %d write leases", plural(c.Acquisitions, "acquisition"), c.Acquisitions-c.WriteLeases, c.WriteLeases)
	}
	return plural(c.Acquisitions, "acquisition") + ", " + plural(c.Writes, "write")
}

// writeOverall writes the run's overall verdict last, with the
// implementations shown for comparison on a line of their own.
func (r *Run) writeOverall(w io.Writer) {
	var peers, mutants []string
	for _, impl := range r.Comparison() {
		part := impl + " " + string(r.VerdictOf(impl))
		if strings.HasPrefix(impl, "mutant-") {
			mutants = append(mutants, part)
		} else {
			peers = append(peers, part)
		}
	}
	if len(peers) > 0 {
		fmt.Fprintf(w, "peers (comparison, do not set the verdict): %s\n", strings.Join(peers, ", "))
	}
	if len(mutants) > 0 {
		fmt.Fprintf(w, "mutants (comparison, deliberately broken for the checkers to catch; do not set the verdict): %s\n", strings.Join(mutants, ", "))
	}
	v := r.Overall()
	r.writeSetBy(w, v)
	d := r.Deciding()
	from := ""
	switch {
	case len(r.Comparison()) > 0:
		from = strings.Join(d, ", ") + "'s verdicts, "
	case len(d) > 1:
		parts := make([]string, len(d))
		for i, impl := range d {
			parts[i] = impl + ": " + string(r.VerdictOf(impl))
		}
		from = strings.Join(parts, ", ") + "; "
	}
	if r.Interrupted {
		from = "interrupted: not every scenario ran; " + from
	}
	if r.CheckedNothing() {
		from = "every scenario run N/A: nothing was checked; " + from
	}
	fmt.Fprintf(w, "overall: %s (%sexit status %d)\n", v, from, v.ExitStatus())
}

// setByShown is how many of the runs that set a non-PASS overall verdict
// the line before it names; the rest are counted.
const setByShown = 12

// writeSetBy names, on the line before the overall verdict, the runs that
// set it when it is not PASS: the deciding implementations' runs whose
// verdict is the overall one (worst first is the overall's rule), with the
// seed a replay needs; an interrupted run says so.
func (r *Run) writeSetBy(w io.Writer, v scenarios.Verdict) {
	if v == scenarios.Pass {
		return
	}
	var runs []string
	for _, o := range r.Outcomes {
		if r.Decides(o.Impl) && o.Verdict == v {
			runs = append(runs, fmt.Sprintf("%s [%s, %s, seed %d]", o.Scenario, o.Impl, o.Build, o.Seed))
		}
	}
	if r.Interrupted && v == scenarios.Unknown {
		runs = append(runs, "the interruption (not every scenario ran)")
	}
	if len(runs) == 0 {
		return
	}
	more := ""
	if len(runs) > setByShown {
		more = fmt.Sprintf("; and %d more (see the table)", len(runs)-setByShown)
		runs = runs[:setByShown]
	}
	fmt.Fprintf(w, "%s set by: %s%s\n", v, strings.Join(runs, "; "), more)
}

// NoHazardNote says, for a run of a scenario about a hazard that shows none
// (a PASS with properties that may show it), why: which of those
// properties had nothing to check (N/A: an implementation without fencing
// tokens has no token order to regress) and which held, the hazard not
// shown. Beside prim's HAZARD, a peer's PASS is then read as what it is, not
// as the better result. "" for any other run.
func NoHazardNote(o *scenarios.Outcome) string {
	if o.Verdict != scenarios.Pass {
		return ""
	}
	var na, held []string
	for _, p := range o.Results {
		if p.Expect != scenarios.MayHazard.String() {
			continue
		}
		switch p.Verdict {
		case scenarios.NA:
			na = append(na, p.Checker)
		case scenarios.Pass:
			held = append(held, p.Checker)
		}
	}
	var parts []string
	if len(na) > 0 {
		parts = append(parts, strings.Join(na, ", ")+": nothing to check")
	}
	if len(held) > 0 {
		why := "not shown"
		if o.Hazard == "no effect" {
			why = "not shown, no fault had the effect it needs"
		}
		parts = append(parts, strings.Join(held, ", ")+": "+why)
	}
	if len(parts) == 0 {
		return ""
	}
	return "no hazard: " + strings.Join(parts, "; ")
}

// hazardWords explain Outcome.Hazard.
var hazardWords = map[string]string{
	"shown":     "shown, after a fault that had its effect:",
	"failed":    "not shown: a property FAILed, with a violation the hazard does not explain; the faults' effects:",
	"not shown": "not shown: the faults had their effect and every property held:",
	"no effect": "not shown: no fault was seen to have the effect the hazard needs (a hazard-kind violation would be FAIL)",
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}

// Seconds formats a history time (ns from the run's start) as the HTML
// timeline's axis does: "3.034s".
func Seconds(ns int64) string {
	if ns == history.Never {
		return "never"
	}
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}

// EvidenceText is an evidence entry as the text surfaces print it: its
// message, then one line per operation, times in seconds from the run's
// start.
func EvidenceText(e models.Evidence) string { return evidenceText(e, false) }

func evidenceText(e models.Evidence, terminal bool) string {
	var b strings.Builder
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Msg)
	for k := range e.Ops {
		if terminal && k == terminalOps {
			fmt.Fprintf(&b, "\n    … %s more", plural(len(e.Ops)-k, "operation"))
			break
		}
		b.WriteString("\n    ")
		b.WriteString(OpText(&e.Ops[k]))
	}
	return b.String()
}

// OpText is an operation as the text surfaces print it: as
// history.Operation.String, its interval in seconds from the run's start
// ("[2.577s – 2.578s]").
func OpText(op *history.Operation) string {
	s := op.String()
	if i := strings.LastIndex(s, " ["); i >= 0 && strings.HasSuffix(s, "]") {
		s = s[:i]
	}
	if !op.Done {
		return s + " [" + Seconds(op.T) + ", never completed]"
	}
	return s + " [" + Seconds(op.T) + " – " + Seconds(op.Return) + "]"
}

// plural is "1 violation", "2 violations".
func plural(n int, word string) string { return strconv.Itoa(n) + " " + pluralWord(n, word) }

func pluralWord(n int, word string) string {
	switch {
	case n == 1:
		return word
	case strings.HasSuffix(word, "y") && !strings.HasSuffix(word, "ey"):
		return word[:len(word)-1] + "ies"
	}
	return word + "s"
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	Out       string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// WriteJUnit writes one test case per scenario × property: FAIL and UNKNOWN
// are failures, HAZARD passes with its evidence in system-out, N/A is
// skipped with its reason. A run that went wrong (its Error) adds a failing
// case named "run", and so does an interrupted run (in a suite of its own).
// The implementations shown for comparison (Run.Comparison:
// the peers and mutants beside prim) are suites named "… (comparison)" whose
// cases never fail: their verdict and evidence are in system-out. So the
// file has a failure exactly when the overall verdict, and the exit status,
// is FAIL or UNKNOWN; the root's name states that verdict.
func WriteJUnit(w io.Writer, r *Run) error {
	out := junitSuites{Name: "coordtorture: overall " + string(r.Overall())}
	for _, o := range r.Outcomes {
		decides := r.Decides(o.Impl)
		s := junitSuite{Name: fmt.Sprintf("%s [%s, %s]", o.Scenario, o.Impl, o.Build)}
		if !decides {
			s.Name += " (comparison: does not set the verdict)"
		}
		class := strings.ReplaceAll(o.Scenario, "/", ".")
		for _, p := range o.Results {
			c := junitCase{Name: p.Checker, ClassName: class, Time: p.Result.Elapsed.Seconds()}
			var ev []string
			for _, e := range p.Result.Evidence {
				ev = append(ev, EvidenceText(e))
			}
			if more := moreText(p.Result, len(ev), false); more != "" {
				ev = append(ev, more)
			}
			msg := fmt.Sprintf("%s (%s): %s", p.Verdict, p.Expect, p.Result.Summary)
			switch p.Verdict {
			case scenarios.Fail, scenarios.Unknown:
				if !decides {
					c.Out = msg + " [comparison: does not set the verdict]\n" + strings.Join(ev, "\n")
					break
				}
				c.Failure = &junitMessage{Message: msg, Body: strings.Join(ev, "\n")}
				s.Failures++
			case scenarios.Hazard:
				c.Out = msg + "\n" + strings.Join(ev, "\n")
			case scenarios.NA: // nothing to check: skipped, with the reason
				c.Skipped = &junitMessage{Message: msg}
				s.Skipped++
			}
			s.Cases = append(s.Cases, c)
			s.Tests++
		}
		if o.Error != "" {
			// The run itself went wrong (servers did not start, a fault did
			// not happen): a failing case of its own, so CI shows it.
			c := junitCase{Name: "run", ClassName: class}
			msg := string(o.Verdict) + ": " + strings.SplitN(o.Error, "\n", 2)[0]
			if decides {
				c.Failure = &junitMessage{Message: msg, Body: o.Error}
				s.Failures++
			} else {
				c.Out = msg + " [comparison: does not set the verdict]\n" + o.Error
			}
			s.Cases = append(s.Cases, c)
			s.Tests++
		}
		out.Suites = append(out.Suites, s)
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Skipped += s.Skipped
	}
	if r.CheckedNothing() {
		// Every run was N/A (the server lacks what the scenarios need):
		// nothing was checked, UNKNOWN (exit status 2), so a failing case
		// says so.
		msg := "every scenario run was N/A (see each one's reason): nothing was checked, so the overall verdict is UNKNOWN"
		out.Suites = append(out.Suites, junitSuite{Name: "coordtorture (nothing checked)", Tests: 1, Failures: 1,
			Cases: []junitCase{{Name: "run", ClassName: "coordtorture", Failure: &junitMessage{Message: msg, Body: r.Command}}}})
		out.Tests++
		out.Failures++
	}
	if r.Interrupted {
		// Not every scenario ran: the overall verdict is UNKNOWN at best
		// (exit status 2) whatever those that finished said, so a failing
		// case says so.
		msg := "interrupted: not every scenario ran (SIGINT or SIGTERM), so the overall verdict is UNKNOWN at best"
		out.Suites = append(out.Suites, junitSuite{Name: "coordtorture (interrupted)", Tests: 1, Failures: 1,
			Cases: []junitCase{{Name: "run", ClassName: "coordtorture", Failure: &junitMessage{Message: msg, Body: r.Command}}}})
		out.Tests++
		out.Failures++
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(out)
}

// ownFiles are the files a report leaves in a run directory (WriteDir's, and
// coordtorture's prim.log), report.json last: a removal cut short leaves it,
// so the directory is still known as a report's. ownDirs are its
// directories, with the one kind of file it writes in each.
var (
	ownFiles = []string{"summary.txt", "junit.xml", "index.html", "prim.log", "report.json"}
	ownDirs  = []struct{ dir, suffix string }{{"histories", ".jsonl.gz"}, {"viz", ".html"}}
)

// ClearPrevious removes from dir the outputs of an earlier report written
// there, when dir holds one (its report.json): summary.txt, junit.xml,
// index.html, prim.log, report.json, the histories/*.jsonl.gz and the
// viz/*.html (each directory too when that leaves it empty). Nothing else is
// touched: a file of the user's stays, in those directories too. Without a
// report.json it removes nothing (a history there may be anyone's). It
// reports whether there was an earlier report. A run written into a
// directory that held another's is then that run's alone: fencecheck,
// given RUN/histories/*, checks the histories report.json lists (issue:
// make torture into runs/latest kept the histories of every earlier run).
func ClearPrevious(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err != nil {
		if os.IsNotExist(err) {
			return false, nil
		}
		return false, err
	}
	for _, d := range ownDirs {
		sub := filepath.Join(dir, d.dir)
		ents, err := os.ReadDir(sub)
		if err != nil && !os.IsNotExist(err) {
			return true, err
		}
		for _, e := range ents {
			if e.Type().IsRegular() && strings.HasSuffix(e.Name(), d.suffix) {
				if err := os.Remove(filepath.Join(sub, e.Name())); err != nil {
					return true, err
				}
			}
		}
		if err == nil {
			_ = os.Remove(sub) // only when empty: a user's file keeps it
		}
	}
	for _, f := range ownFiles {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
			return true, err
		}
	}
	return true, nil
}

// WriteDir writes summary.txt, report.json, junit.xml, index.html,
// histories/*.jsonl.gz and, for every property whose checker drew one, its
// porcupine visualization (viz/*.html, see VisualizationFile) into dir
// (created if needed).
func WriteDir(dir string, r *Run) error {
	if err := os.MkdirAll(filepath.Join(dir, "histories"), 0o755); err != nil {
		return err
	}
	for _, o := range r.Outcomes {
		for _, p := range o.Results {
			if p.Result.Visualization == nil {
				continue
			}
			name := filepath.Join(dir, filepath.FromSlash(VisualizationFile(o, p.Checker)))
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(name, p.Result.Visualization, 0o644); err != nil {
				return err
			}
		}
	}
	for _, o := range r.Outcomes {
		// The run's expectations (header) first: fencecheck then reaches
		// the run's verdict offline.
		if err := history.WriteFile(filepath.Join(dir, HistoryFile(o)), o.Header, o.Records); err != nil {
			return err
		}
	}
	write := func(name string, f func(io.Writer) error) error {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return err
		}
		return fh.Close()
	}
	if err := write("summary.txt", func(w io.Writer) error { return WriteSummary(w, r) }); err != nil {
		return err
	}
	if err := write("junit.xml", func(w io.Writer) error { return WriteJUnit(w, r) }); err != nil {
		return err
	}
	if err := write("index.html", func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		if err := WriteHTML(bw, r); err != nil {
			return err
		}
		return bw.Flush()
	}); err != nil {
		return err
	}
	return write("report.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	})
}
