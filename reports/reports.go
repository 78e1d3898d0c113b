// Package reports renders scenario outcomes: a text summary, JSON, JUnit XML
// (one test case per scenario × property), a self-contained HTML page (verdict
// table, per-scenario timelines of lock holders and faults, latency
// histograms), porcupine's visualizations, and every history as JSONL that
// cmd/fencecheck can check again offline.
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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Run is one coordtorture run: its settings and its outcomes.
type Run struct {
	Started  time.Time            `json:"started"`
	Command  string               `json:"command"`
	Outcomes []*scenarios.Outcome `json:"outcomes"`
}

// Verdict is the worst verdict of the run.
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

// HistoryFile is the file name of an outcome's history inside a run directory
// (gzip-compressed JSONL: history.WriteFile).
func HistoryFile(o *scenarios.Outcome) string {
	return filepath.Join("histories", strings.ReplaceAll(o.Scenario, "/", "__")+"."+o.Impl+"."+o.Build+".jsonl.gz")
}

// WriteSummary writes the verdict table.
func WriteSummary(w io.Writer, r *Run) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tIMPL\tSERVER\tOPS\tOPS/S\tVERDICT\tPROPERTIES")
	for _, o := range r.Outcomes {
		var ps []string
		for _, p := range o.Results {
			ps = append(ps, fmt.Sprintf("%s=%s", p.Checker, p.Verdict))
		}
		if o.Error != "" {
			ps = append(ps, "error: "+o.Error)
		}
		rate := "-"
		if o.Duration > 0 && o.Ops > 0 {
			rate = fmt.Sprintf("%.0f", float64(o.Ops)/o.Duration.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", o.Scenario, o.Impl, o.Build, o.Ops, rate, o.Verdict, strings.Join(ps, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var unc []string
	for _, o := range r.Outcomes {
		if u := o.Uncertain; u.Info > 0 {
			line := fmt.Sprintf("  %s [%s]: %d info operations, %d of them acquisitions", o.Scenario, o.Impl, u.Info, u.InfoAcquisitions)
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
	var hz []string
	for _, o := range r.Outcomes {
		if o.Hazard == "" {
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
	for _, o := range r.Outcomes {
		for _, p := range o.Results {
			if p.Verdict == scenarios.Pass {
				continue
			}
			fmt.Fprintf(w, "\n%s %s [%s] %s (%s, seed %d): %s\n", p.Verdict, o.Scenario, o.Impl, p.Checker, p.Expect, o.Seed, p.Result.Summary)
			for i, e := range p.Result.Evidence {
				if i == 3 {
					fmt.Fprintf(w, "  … %d more\n", len(p.Result.Evidence)-3)
					break
				}
				fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(e.String(), "\n", "\n  "))
			}
		}
	}
	fmt.Fprintf(w, "\noverall: %s%s\n", r.Verdict(), r.byImpl())
	return nil
}

// hazardWords explain Outcome.Hazard.
var hazardWords = map[string]string{
	"shown":     "shown, after a fault that had its effect:",
	"failed":    "not shown: a property FAILed, with a violation the hazard does not explain; the faults' effects:",
	"not shown": "not shown: the faults had their effect and every property held:",
	"no effect": "not shown: no fault was seen to have the effect the hazard needs (a hazard-kind violation would be FAIL)",
}

// byImpl is " (prim: HAZARD, redislock: FAIL)" when the run has several
// implementations, so a reader sees whose verdict the overall one is; "" else.
func (r *Run) byImpl() string {
	var impls []string
	for _, o := range r.Outcomes {
		if !slices.Contains(impls, o.Impl) {
			impls = append(impls, o.Impl)
		}
	}
	if len(impls) < 2 {
		return ""
	}
	parts := make([]string, len(impls))
	for i, impl := range impls {
		parts[i] = impl + ": " + string(r.VerdictOf(impl))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
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
// skipped with its reason. A run that
// went wrong (its Error) adds a failing case named "run".
func WriteJUnit(w io.Writer, r *Run) error {
	var out junitSuites
	for _, o := range r.Outcomes {
		s := junitSuite{Name: fmt.Sprintf("%s [%s, %s]", o.Scenario, o.Impl, o.Build)}
		for _, p := range o.Results {
			c := junitCase{Name: p.Checker, ClassName: strings.ReplaceAll(o.Scenario, "/", "."), Time: p.Result.Elapsed.Seconds()}
			var ev []string
			for _, e := range p.Result.Evidence {
				ev = append(ev, e.String())
			}
			msg := fmt.Sprintf("%s (%s): %s", p.Verdict, p.Expect, p.Result.Summary)
			switch p.Verdict {
			case scenarios.Fail, scenarios.Unknown:
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
			s.Cases = append(s.Cases, junitCase{Name: "run", ClassName: strings.ReplaceAll(o.Scenario, "/", "."),
				Failure: &junitMessage{Message: string(o.Verdict) + ": " + strings.SplitN(o.Error, "\n", 2)[0], Body: o.Error}})
			s.Tests++
			s.Failures++
		}
		out.Suites = append(out.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(out)
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
