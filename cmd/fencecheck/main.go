// Command fencecheck checks recorded coordination histories offline.
//
//	fencecheck [flags] HISTORY.jsonl[.gz]...
//
// It reads each history (JSON Lines, see history/FORMAT.md, plain or
// gzip-compressed; "-" or no argument reads standard input; a last record
// cut short by a crash is reported and ignored), runs the chosen checkers of package models
// (by default those of the history's header, with the run's options and
// expectations, else every checker that applies to the operations present),
// judges them as coordtorture does (models.Judge), prints one verdict line
// per property, and exits as coordtorture: 0 when everything passed or showed
// its documented hazard, 1 when a property was violated, 2 when a check was
// undecided or an input was unreadable. Several files end with one overall
// line: the worst file's verdict, or for the histories of one run
// (RUN/histories/) the run's rule (only prim's verdicts when prim ran beside
// peers or mutants) over the files its report.json lists (with a file it
// does not list: the worst file's), which sets the exit status. Run fencecheck --help for
// the flags and the checkers.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
