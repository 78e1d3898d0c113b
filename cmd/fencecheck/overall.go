package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/coordtorture/coordtorture/models"
)

// overall is the one verdict of all the inputs, the one that sets the exit
// status.
type overall struct {
	Verdict models.Judgement
	// Run is the run directory when the inputs are the histories of one
	// run ("" otherwise).
	Run string
	// From are the implementations whose verdicts decide, for one run's
	// histories; Comparison the others, with their verdicts.
	From       []string
	Comparison []string
	// NotFromRun are the inputs in RUN/histories/ that the run's
	// report.json does not list (an earlier run's, a file put there): with
	// any, the inputs are no one run's and the worst of them decides.
	// Missing are the histories report.json lists that are not on disk:
	// each counts UNKNOWN.
	NotFromRun []string
	Missing    []string
	files      int
}

// fileJudgement is a file's verdict for the overall one: UNKNOWN when it
// could not be checked.
func fileJudgement(fr fileReport) models.Judgement {
	if fr.Error != "" || len(fr.Results) == 0 {
		return models.JudgedUnknown
	}
	return fr.Verdict
}

// runDirOf returns the run directory the named inputs all lie in, as
// coordtorture writes them (RUN/histories/*.jsonl.gz), or "" when they are
// not one run's (standard input, or another layout).
func runDirOf(names []string) string {
	dir := ""
	for _, name := range names {
		if name == "-" {
			return ""
		}
		abs, err := filepath.Abs(name)
		if err != nil {
			return ""
		}
		hist := filepath.Dir(abs)
		if filepath.Base(hist) != "histories" || (dir != "" && filepath.Dir(hist) != dir) {
			return ""
		}
		dir = filepath.Dir(hist)
	}
	return dir
}

// decideOverall computes the inputs' one verdict. Inputs of no one run: the
// worst of them (models.Overall). Inputs in RUN/histories/ of which the
// run's report.json does not list one (each outcome's history file): not
// from that run, said so (NotFromRun), and the worst of them all decides. A
// history report.json lists that is not on disk counts UNKNOWN (Missing),
// by either rule. One run's histories: the run's rule, as
// coordtorture states it — the implementations its report.json names
// ("overall_from"; "interrupted" makes it UNKNOWN at best), else prim alone
// when prim ran beside others (the peers and mutants are a comparison), else
// every implementation. A file whose header could not be read counts, as
// UNKNOWN, whatever its implementation; when none of the files is of a
// deciding implementation, every file decides.
func decideOverall(names []string, files []fileReport) overall {
	o := overall{files: len(files)}
	var js []models.Judgement
	for _, fr := range files {
		js = append(js, fileJudgement(fr))
	}
	o.Run = runDirOf(names)
	if o.Run == "" {
		o.Verdict = models.Overall(js...)
		return o
	}
	var stated struct {
		OverallFrom []string `json:"overall_from"`
		Interrupted bool     `json:"interrupted"`
		// Outcomes absent (not a report coordtorture wrote): which files
		// are the run's is not known, and every one is taken as its.
		Outcomes *[]struct {
			Scenario, Impl, Build string
		} `json:"outcomes"`
	}
	if b, err := os.ReadFile(filepath.Join(o.Run, "report.json")); err == nil {
		_ = json.Unmarshal(b, &stated) // unreadable: the rule from the headers
	}
	missingImpl := map[string]string{} // a missing history's implementation
	if stated.Outcomes != nil {
		listed := map[string]bool{}
		for _, out := range *stated.Outcomes {
			name := models.HistoryName(out.Scenario, out.Impl, out.Build)
			listed[name] = true
			if _, err := os.Stat(filepath.Join(o.Run, "histories", name)); os.IsNotExist(err) {
				o.Missing = append(o.Missing, name)
				missingImpl[name] = out.Impl
			}
		}
		for _, name := range names {
			base := filepath.Base(name)
			if !listed[base] && !listed[base+".gz"] { // a history gunzipped in place is still the run's
				o.NotFromRun = append(o.NotFromRun, base)
			}
		}
	}
	if len(o.NotFromRun) > 0 {
		o.Run = ""
		for range o.Missing {
			js = append(js, models.JudgedUnknown)
		}
		o.Verdict = models.Overall(js...)
		return o
	}
	var impls []string
	for _, fr := range files {
		if fr.Header != nil && !slices.Contains(impls, fr.Header.Impl) {
			impls = append(impls, fr.Header.Impl)
		}
	}
	o.From = models.Deciding(stated.OverallFrom, impls)
	var deciding []models.Judgement
	if stated.Interrupted {
		deciding = append(deciding, models.JudgedUnknown)
	}
	worst := map[string][]models.Judgement{}
	for i, fr := range files {
		if fr.Header == nil || slices.Contains(o.From, fr.Header.Impl) {
			deciding = append(deciding, js[i])
		} else {
			worst[fr.Header.Impl] = append(worst[fr.Header.Impl], js[i])
		}
	}
	for _, name := range o.Missing {
		if impl := missingImpl[name]; slices.Contains(o.From, impl) {
			deciding = append(deciding, models.JudgedUnknown)
		} else {
			worst[impl] = append(worst[impl], models.JudgedUnknown)
			if !slices.Contains(impls, impl) {
				impls = append(impls, impl)
			}
		}
	}
	if len(deciding) == 0 { // only comparison files given, none missing: each decides
		o.From, deciding, worst = impls, js, nil
	}
	for _, impl := range impls {
		if w, ok := worst[impl]; ok {
			o.Comparison = append(o.Comparison, impl+" "+string(models.Overall(w...)))
		}
	}
	o.Verdict = models.Overall(deciding...)
	return o
}

// printOverall writes the overall verdict last, the comparison before it.
func printOverall(w io.Writer, o overall) {
	if len(o.NotFromRun) > 0 {
		fmt.Fprintf(w, "not from that run (its report.json does not list them): %s; the run's rule does not apply\n", strings.Join(o.NotFromRun, ", "))
	}
	if len(o.Missing) > 0 {
		fmt.Fprintf(w, "missing (report.json lists them, not on disk; each counts UNKNOWN): %s\n", strings.Join(o.Missing, ", "))
	}
	if len(o.Comparison) > 0 {
		fmt.Fprintf(w, "comparison (does not set the verdict): %s\n", strings.Join(o.Comparison, ", "))
	}
	from := fmt.Sprintf("the worst of %d files", o.files)
	if o.Run != "" {
		from = fmt.Sprintf("one run's histories, %s: %s's verdicts", o.Run, strings.Join(o.From, ", "))
	}
	fmt.Fprintf(w, "overall: %s (%s; exit status %d)\n", o.Verdict, from, o.Verdict.ExitStatus())
}
