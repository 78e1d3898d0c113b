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

// Exit statuses.
const (
	exitPass    = 0
	exitFail    = 1
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
Malformed input is reported with its line and column and exits 2.
`

// fileReport is the --json form of one input.
type fileReport struct {
	File    string         `json:"file"`
	Records int            `json:"records"`
	Ops     int            `json:"ops"`
	Error   string         `json:"error,omitempty"`
	Results []resultReport `json:"results"`
}

type resultReport struct {
	models.Result
	HTML string `json:"html,omitempty"`
}

type report struct {
	Exit  int          `json:"exit"`
	Files []fileReport `json:"files"`
}

type config struct {
	check   string
	htmlDir string
	json    bool
	opts    models.Options
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
	worst := exitPass
	written := make(map[string]bool)
	for _, name := range files {
		fr := checkFile(name, stdin, cfg, written, stderr)
		rep.Files = append(rep.Files, fr)
		worst = combine(worst, fileExit(fr))
		if !cfg.json {
			printText(stdout, fr, len(files) > 1)
		}
	}
	rep.Exit = worst
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "fencecheck: %v\n", err)
			return exitUnknown
		}
	}
	return worst
}

// combine: a violation dominates, then undecided/unreadable, then pass.
func combine(a, b int) int {
	if a == exitFail || b == exitFail {
		return exitFail
	}
	return max(a, b)
}

func fileExit(fr fileReport) int {
	if fr.Error != "" {
		return exitUnknown
	}
	if len(fr.Results) == 0 {
		return exitUnknown
	}
	code := exitPass
	for _, r := range fr.Results {
		switch r.Verdict {
		case models.Fail:
			return exitFail
		case models.Unknown:
			code = exitUnknown
		}
	}
	return code
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
	h, err := history.Read(r)
	if err != nil {
		fr.Error = err.Error()
		fmt.Fprintf(stderr, "fencecheck: %s: %v\n", fr.File, err)
		return fr
	}
	fr.Records, fr.Ops = len(h.Records), len(h.Ops)
	checkers, err := models.Select(h, cfg.check)
	if err != nil {
		fr.Error = err.Error()
		return fr
	}
	if len(checkers) == 0 {
		fr.Error = "no checker applies to the operations present (see --help, or choose with --check)"
		return fr
	}
	for _, res := range models.Run(h, checkers, cfg.opts) {
		rr := resultReport{Result: res}
		if cfg.htmlDir != "" && res.Visualization != nil {
			path, err := writeHTML(cfg.htmlDir, name, res, written)
			if err != nil {
				fmt.Fprintf(stderr, "fencecheck: %v\n", err)
			} else {
				rr.HTML = path
			}
		}
		fr.Results = append(fr.Results, rr)
	}
	return fr
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

func printText(w io.Writer, fr fileReport, header bool) {
	if header || fr.Error != "" {
		fmt.Fprintf(w, "== %s: %d records, %d operations\n", fr.File, fr.Records, fr.Ops)
	}
	if fr.Error != "" {
		fmt.Fprintf(w, "UNKNOWN %s\n", fr.Error)
		return
	}
	for _, r := range fr.Results {
		fmt.Fprintln(w, r.String())
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
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, `Usage: fencecheck [flags] HISTORY.jsonl...

Checks recorded coordination histories offline. With no file, or "-", reads
standard input. Prints one verdict line per property (PASS, FAIL with the
operations involved, UNKNOWN) per file.

Exit status: 0 every property passed; 1 a property was violated; 2 a check was
undecided (porcupine timeout, missing information), no checker applied, or an
input was unreadable or malformed. A violation wins over the others.

%s
Checkers (--check a,b; default: those whose operations appear in the history):
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
