package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
)

// Exit statuses (a verdict's is models.Judgement.ExitStatus; FAIL is 1).
const (
	exitPass    = 0
	exitUnknown = 2
)

const formatHelp = `Input: JSON Lines, one record per line, as written by coordtorture
(full specification: history/FORMAT.md in the coordtorture repository):

  {"i":17,"proc":3,"type":"invoke","f":"acquire","key":"k","t":1234567}
  {"i":18,"proc":3,"type":"ok","f":"acquire","key":"k","token":12,"owner":"9f..","ttl_ms":500,"t":1301112}

  i     record number, strictly increasing      proc  process, one operation in flight at a time
  type  invoke, then ok | fail | info           f     operation name (acquire, release, write, ...)
  t     nanoseconds, monotonic, non-decreasing  + key, field, token, owner, ttl_ms, value, err, n,
                                                  count, gen, seq, capacity, algo, limit, ...
  ok = happened, fail = definitely did not happen, info = unknown (may happen later).
A gzip-compressed history (coordtorture writes histories/*.jsonl.gz) is read as
its text; gzip is recognised by its magic bytes, whatever the file's name.
A last line cut short (its writer crashed) is reported and ignored, and so is
the missing end of a gzip stream: the records before it are checked.
Malformed input anywhere else is reported with its line and column and exits 2.
`

// fileReport is the --json form of one input.
type fileReport struct {
	File string `json:"file"`
	// Records is the number of records read, Ops the operations they form.
	Records int    `json:"records"`
	Ops     int    `json:"ops"`
	Error   string `json:"error,omitempty"`
	// Cut says what the end of a history cut short by a crash lacked (it
	// was ignored); nil for a complete history.
	Cut *history.Cut `json:"cut,omitempty"`
	// Header is the history's header: the run whose expectations were
	// applied (nil: none, every violation is FAIL).
	Header *history.Header `json:"header,omitempty"`
	// Overrides say which flags replaced the header's settings.
	Overrides []string `json:"overrides,omitempty"`
	// Run lists why the run's faults did not all happen (UNKNOWN).
	Run []string `json:"run,omitempty"`
	// Omitted names the checkers that apply to the history but that its
	// header's properties leave out (not run: the run did not check them).
	Omitted []string `json:"omitted,omitempty"`
	// Hazard says whether a may-show-hazard scenario showed its hazard.
	Hazard string `json:"hazard,omitempty"`
	// Effects lists the proven fault effects ("at 1.8s: …").
	Effects []string `json:"effects,omitempty"`
	// Verdict is the worst judgement of the file (the run's verdict).
	Verdict models.Judgement `json:"verdict"`
	Results []resultReport   `json:"results"`
}

type resultReport struct {
	models.Result
	// Expect is the property's expectation (from the header).
	Expect string `json:"expect,omitempty"`
	// Judgement is the property's verdict under its expectation: what
	// coordtorture decided for it. Verdict is the checker's own.
	Judgement models.Judgement `json:"judgement"`
	// Note explains an N/A: the run's reason, confirmed by the history.
	Note string `json:"note,omitempty"`
	HTML string `json:"html,omitempty"`
}

type report struct {
	Exit int `json:"exit"`
	// Overall is the inputs' one verdict (Exit is its exit status): the
	// worst file's, or for one run's histories the run's rule (Run, the run
	// directory; OverallFrom, the implementations whose verdicts decide;
	// Comparison, the others with their verdicts).
	Overall     models.Judgement `json:"overall"`
	Run         string           `json:"run,omitempty"`
	OverallFrom []string         `json:"overall_from,omitempty"`
	Comparison  []string         `json:"comparison,omitempty"`
	// NotFromRun and Missing: see overall.
	NotFromRun []string     `json:"not_from_run,omitempty"`
	Missing    []string     `json:"missing,omitempty"`
	Files      []fileReport `json:"files"`
}

type config struct {
	check   string
	htmlDir string
	json    bool
	opts    models.Options
	// set are the flags given on the command line: they override a header.
	set map[string]bool
}

// run is fencecheck: args without the program name. It returns the exit
// status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencecheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.check, "check", "", "comma-separated checkers to run, or \"all\" (default: all that apply to the ops present)")
	fs.StringVar(&cfg.htmlDir, "html", "", "write porcupine visualizations of failures and timeouts to this `dir`")
	fs.BoolVar(&cfg.json, "json", false, "print a JSON report instead of text")
	fs.DurationVar(&cfg.opts.Drift, "drift", 0, "clock drift allowance: validity windows and rate-limit spans shrink by it")
	fs.DurationVar(&cfg.opts.Timeout, "timeout", 10*time.Second, "porcupine search timeout per check (timeout = UNKNOWN)")
	fs.Int64Var(&cfg.opts.Capacity, "capacity", 0, "semaphore capacity (overrides the capacity field)")
	fs.DurationVar(&cfg.opts.WakeBound, "wake-bound", time.Second, "liveness: a free lock must be acquired within this")
	fs.BoolVar(&cfg.opts.LostNotifications, "lost-notifications", false, "liveness: release notifications may have been lost")
	fs.BoolVar(&cfg.opts.DenseTokens, "dense-tokens", false, "token-order: tokens come from a counter incremented once per grant")
	fs.IntVar(&cfg.opts.MaxEvidence, "max-evidence", 10, "violations detailed per checker")
	fs.Usage = func() {} // the flag package reports the error itself
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(fs, stdout)
			return exitPass
		}
		fmt.Fprintln(stderr, "fencecheck: see fencecheck --help")
		return exitUnknown
	}
	cfg.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.set[f.Name] = true })
	if cfg.check != "" && cfg.check != "all" {
		if _, err := models.Select(&history.History{}, cfg.check); err != nil {
			fmt.Fprintf(stderr, "fencecheck: %v\n", strings.TrimPrefix(err.Error(), "models: "))
			return exitUnknown
		}
	}
	if cfg.htmlDir != "" {
		if err := os.MkdirAll(cfg.htmlDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "fencecheck: %v\n", err)
			return exitUnknown
		}
	}
	files := fs.Args()
	if len(files) == 0 {
		files = []string{"-"}
	}
	rep := report{Exit: exitPass}
	written := make(map[string]bool)
	for _, name := range files {
		fr := checkFile(name, stdin, cfg, written, stderr)
		rep.Files = append(rep.Files, fr)
		if !cfg.json {
			printText(stdout, fr)
		}
	}
	o := decideOverall(files, rep.Files)
	rep.Overall, rep.Run, rep.OverallFrom, rep.Comparison = o.Verdict, o.Run, o.From, o.Comparison
	rep.NotFromRun, rep.Missing = o.NotFromRun, o.Missing
	rep.Exit = o.Verdict.ExitStatus()
	if !cfg.json && (len(files) > 1 || len(o.NotFromRun) > 0 || len(o.Missing) > 0) {
		printOverall(stdout, o)
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "fencecheck: %v\n", err)
			return exitUnknown
		}
	}
	return rep.Exit
}

func displayName(name string) string {
	if name == "-" {
		return "<stdin>"
	}
	return name
}

func checkFile(name string, stdin io.Reader, cfg config, written map[string]bool, stderr io.Writer) fileReport {
	fr := fileReport{File: displayName(name), Results: []resultReport{}}
	var r io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fr.Error = err.Error()
			fmt.Fprintf(stderr, "fencecheck: %v\n", err)
			return fr
		}
		defer f.Close()
		r = f
	}
	h, err := history.ReadTolerant(r)
	if err != nil {
		fr.Error = err.Error()
		fmt.Fprintf(stderr, "fencecheck: %s: %v\n", fr.File, err)
		return fr
	}
	fr.Records, fr.Ops = len(h.Records), len(h.Ops)
	fr.Header = h.Header
	fr.Cut = h.Cut
	props, opts, notChecked, err := plan(h, cfg, &fr)
	if err != nil {
		fr.Error = err.Error()
		return fr
	}
	if len(props) == 0 {
		fr.Error = "no checker applies to the operations present (see --help, or choose with --check)"
		return fr
	}
	// The rule coordtorture applies (models.Judge): with a header, a
	// violation of a may-show-hazard property is HAZARD only when every
	// violation is of its hazard kinds, after a fault with a proven effect.
	effects := models.Effects(h)
	js := make([]models.Judgement, 0, len(props)+1)
	for _, p := range props {
		rr := resultReport{}
		if fr.Header != nil {
			rr.Expect = p.Expect.String()
		}
		var known bool
		rr.Result, rr.Judgement, known = models.CheckProperty(h, p, notChecked[p.Checker], opts, effects)
		switch {
		case !known:
			rr.Summary = fmt.Sprintf("undecided: this fencecheck has no checker %q", p.Checker)
		case rr.Judgement == models.JudgedNA:
			rr.Note = "the run had nothing to check (its reason, from the header), and the history holds nothing this checker reads"
		}
		if cfg.htmlDir != "" && rr.Visualization != nil {
			path, err := writeHTML(cfg.htmlDir, name, rr.Result, written)
			if err != nil {
				fmt.Fprintf(stderr, "fencecheck: %v\n", err)
			} else {
				rr.HTML = path
			}
		}
		fr.Results = append(fr.Results, rr)
		js = append(js, rr.Judgement)
	}
	if hd := fr.Header; hd != nil {
		// A fault that did not happen as scheduled leaves the run untested.
		if fr.Run = models.FaultsNotHappened(h, hd.Nemesis, hd.FaultsScheduled); len(fr.Run) > 0 {
			js = append(js, models.JudgedUnknown)
		}
		fr.Hazard = models.HazardOutcome(props, js, effects)
		for _, ef := range effects {
			fr.Effects = append(fr.Effects, fmt.Sprintf("at %.1fs: %s", time.Duration(ef.At).Seconds(), ef.What))
		}
	}
	if fr.Header != nil {
		// The header chooses the run's properties; the checkers that apply
		// to the history but that it leaves out are named, so a header
		// alone cannot hide what the history holds.
		named := map[string]bool{}
		for _, p := range props {
			named[p.Checker] = true
		}
		for _, c := range models.Applicable(h) {
			if !named[c.Name] {
				fr.Omitted = append(fr.Omitted, c.Name)
			}
		}
	}
	fr.Verdict = models.Overall(js...)
	return fr
}

// plan decides what to check: without a header (or with --check) the chosen
// or applicable checkers, each must hold; with a header its properties, with
// their expectations, and its options. Flags given on the command line
// override the header, and fr.Overrides says which. notChecked holds the
// header's reasons for the properties the run had nothing to check (data:
// models.CheckProperty confirms them from the history). A header carries no
// verdict: every property is recomputed.
func plan(h *history.History, cfg config, fr *fileReport) (props []models.Property, o models.Options, notChecked map[string]string, err error) {
	o = cfg.opts
	var hprops []models.Property
	if hd := h.Header; hd != nil {
		if hprops, o, err = models.FromHeader(hd); err != nil {
			return nil, o, nil, err
		}
		notChecked = map[string]string{}
		for _, hp := range hd.Properties {
			if hp.NotChecked != "" {
				notChecked[hp.Checker] = hp.NotChecked
			}
		}
		for _, f := range []struct {
			name  string
			apply func()
		}{
			{"drift", func() { o.Drift = cfg.opts.Drift }},
			{"timeout", func() { o.Timeout = cfg.opts.Timeout }},
			{"capacity", func() { o.Capacity = cfg.opts.Capacity }},
			{"wake-bound", func() { o.WakeBound = cfg.opts.WakeBound }},
			{"lost-notifications", func() { o.LostNotifications = cfg.opts.LostNotifications }},
			{"dense-tokens", func() { o.DenseTokens = cfg.opts.DenseTokens }},
			{"max-evidence", func() { o.MaxEvidence = cfg.opts.MaxEvidence }},
		} {
			if cfg.set[f.name] {
				f.apply()
				fr.Overrides = append(fr.Overrides, "--"+f.name+" overrides the run's option")
			}
		}
		if cfg.check == "" {
			return hprops, o, notChecked, nil
		}
		fr.Overrides = append(fr.Overrides, "--check overrides the run's properties (a checker the run did not have must hold)")
	}
	checkers, err := models.Select(h, cfg.check)
	if err != nil {
		return nil, o, nil, err
	}
	for _, c := range checkers {
		p := models.Property{Checker: c.Name}
		for _, hp := range hprops {
			if hp.Checker == c.Name {
				p = hp
			}
		}
		props = append(props, p)
	}
	return props, o, nil, nil
}

func writeHTML(dir, input string, res models.Result, written map[string]bool) (string, error) {
	base := "stdin"
	if input != "-" {
		base = strings.TrimSuffix(filepath.Base(input), filepath.Ext(input))
	}
	path := filepath.Join(dir, base+"."+res.Checker+".html")
	for n := 2; written[path]; n++ {
		path = filepath.Join(dir, fmt.Sprintf("%s-%d.%s.html", base, n, res.Checker))
	}
	written[path] = true
	return path, os.WriteFile(path, res.Visualization, 0o644)
}

func printText(w io.Writer, fr fileReport) {
	fmt.Fprintf(w, "== %s: %s, %s\n", fr.File, plural(fr.Records, "record"), plural(fr.Ops, "operation"))
	if fr.Cut != nil {
		fmt.Fprintf(w, "  %s\n", fr.Cut)
	}
	if hd := fr.Header; hd != nil {
		fmt.Fprintf(w, "header: %s [%s, %s] seed %d: the run's properties, expectations and checker options\n",
			orDash(hd.Scenario), orDash(hd.Impl), orDash(hd.Build), hd.Seed)
		for _, o := range fr.Overrides {
			fmt.Fprintf(w, "  %s\n", o)
		}
	}
	if fr.Error != "" {
		fmt.Fprintf(w, "UNKNOWN %s\n", fr.Error)
		return
	}
	for _, r := range fr.Results {
		name := r.Checker
		if r.Expect != "" {
			name += " (" + r.Expect + ")"
		}
		fmt.Fprintf(w, "%-7s %s: %s\n", r.Judgement, name, r.Summary)
		if r.Note != "" {
			fmt.Fprintf(w, "    %s\n", r.Note)
		}
		for _, e := range r.Evidence {
			fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(e.String(), "\n", "\n    "))
		}
		if r.Violations > len(r.Evidence) && r.Verdict == models.Fail {
			fmt.Fprintf(w, "    ... %d more\n", r.Violations-len(r.Evidence))
		}
		if r.HTML != "" {
			fmt.Fprintf(w, "    visualization: %s\n", r.HTML)
		}
	}
	for _, why := range fr.Run {
		fmt.Fprintf(w, "UNKNOWN run: %s\n", why)
	}
	if len(fr.Omitted) > 0 {
		fmt.Fprintf(w, "also applicable, not in the header (the run did not check them; --check %s checks them): %s\n", fr.Omitted[0], strings.Join(fr.Omitted, ", "))
	}
	if fr.Header != nil {
		if fr.Hazard != "" {
			fmt.Fprintf(w, "hazard %s\n", hazardWords[fr.Hazard])
			for _, ef := range fr.Effects {
				fmt.Fprintf(w, "  %s\n", ef)
			}
		}
		fmt.Fprintf(w, "verdict: %s\n", fr.Verdict)
	}
}

// hazardWords explain fileReport.Hazard, as coordtorture's summary does.
var hazardWords = map[string]string{
	"shown":     "shown, after a fault that had its effect:",
	"failed":    "not shown: a property FAILed, with a violation the hazard does not explain; the faults' effects:",
	"not shown": "not shown: the faults had their effect and every property held:",
	"no effect": "not shown: no fault was seen to have the effect the hazard needs (a hazard-kind violation is FAIL)",
}

// plural is "1 record", "2 records".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, `Usage: fencecheck [flags] HISTORY.jsonl[.gz]...

Checks recorded coordination histories offline. With no file, or "-", reads
standard input. Prints, per file, the records it read, then one verdict line
per property (PASS, FAIL with the operations involved, UNKNOWN).

A history coordtorture wrote starts with a header carrying the run's
expectations: fencecheck then runs exactly the run's checkers with the run's
options and judges them by the run's rule, so it reaches the run's verdict per
property and overall. A violation of a may-show-hazard property is HAZARD only
when every violation is of the hazard's kinds and follows a fault with a proven
effect; a scheduled fault that did not happen makes the run UNKNOWN. No verdict
is taken from the header: every property is recomputed from the history and the
data the header carries (the servers' state a check read after the run, the
run's reason for a property with nothing to check, N/A only when the history
indeed holds nothing to check), or is UNKNOWN naming what it lacks. Flags given
on the command line override the header (and say so). Without a header every
violation is FAIL.

Exit status (as coordtorture's): 0 every property passed or showed its
documented hazard (HAZARD); 1 a property was violated (FAIL); 2 a check was
undecided (porcupine timeout, missing information, a fault that did not
happen), no checker applied, or an input was unreadable or malformed. A
violation wins over the others.

Several files end with one overall line, whose verdict sets the exit status:
the worst file's, or, for the histories of one run (files of one run
directory's histories/, as coordtorture writes them), the run's rule: only
prim's verdicts when prim ran beside peers or mutants (theirs are shown for
comparison), or the implementations the run's report.json names. That rule
covers only the histories report.json lists: a file there it does not list
is not from that run (an earlier run's), said so, and then the worst of every
file decides; a history it lists that is not on disk counts UNKNOWN.

%s
Checkers (--check a,b; default: the header's, else those whose operations appear in the history):
`, formatHelp)
	for _, c := range models.Checkers() {
		fmt.Fprintf(w, "  %-16s %s\n", c.Name, strings.ReplaceAll(c.Doc, "\n", "\n                   "))
	}
	fmt.Fprintf(w, "\nFlags:\n")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}
