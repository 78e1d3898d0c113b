// Command fencecheck checks recorded coordination histories offline.
//
//	fencecheck [flags] HISTORY.jsonl...
//
// It reads each history (JSON Lines, see history/FORMAT.md; "-" or no
// argument reads standard input), runs the chosen checkers of package models
// (by default every checker that applies to the operations present), prints
// one verdict line per property, and exits 0 when everything passed, 1 when a
// property was violated, 2 when a check was undecided or an input was
// unreadable. Run fencecheck --help for the flags and the checkers.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
