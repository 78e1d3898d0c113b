package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/coordtorture/coordtorture/scenarios"
)

// listWidth is the width `coordtorture list` fits: a common terminal's.
const listWidth = 120

// writeList writes the scenarios as list shows them, each line at most
// listWidth columns: a line with the scenario's name and topology (the names
// padded to one column while that fits), then, indented, its description and
// its properties under what is expected of them, wrapped.
func writeList(w io.Writer, ss []*scenarios.Scenario) {
	pad := 0
	for _, s := range ss {
		pad = max(pad, utf8.RuneCountInString(s.Name))
	}
	const indent = "    "
	for _, s := range ss {
		topo := s.Topo.String()
		if pad+2+utf8.RuneCountInString(topo) <= listWidth {
			fmt.Fprintln(w, s.Name+strings.Repeat(" ", pad-utf8.RuneCountInString(s.Name)+2)+topo)
		} else {
			for _, ln := range wrap(s.Name+" "+topo, listWidth, "", indent) {
				fmt.Fprintln(w, ln)
			}
		}
		for _, ln := range wrap(s.Summary, listWidth, indent, indent) {
			fmt.Fprintln(w, ln)
		}
		must, may := mustMay(s)
		for _, group := range []struct {
			label  string
			checks []string
		}{{"must hold: ", must}, {"may show hazard: ", may}} {
			if len(group.checks) == 0 {
				continue
			}
			for _, ln := range wrap(group.label+strings.Join(group.checks, ", "), listWidth, indent, indent+"  ") {
				fmt.Fprintln(w, ln)
			}
		}
	}
}

// mustMay splits s's properties into those that must hold and those that may
// show a hazard, in the scenario's order.
func mustMay(s *scenarios.Scenario) (must, may []string) {
	for _, p := range s.Properties {
		if p.Expect == scenarios.MayHazard {
			may = append(may, p.Checker)
		} else {
			must = append(must, p.Checker)
		}
	}
	return must, may
}

// wrap breaks text into lines of at most width runes at spaces, the first
// line starting with first, the others with rest; a word longer than a line
// is cut.
func wrap(text string, width int, first, rest string) []string {
	var lines []string
	line, n := first, utf8.RuneCountInString(first)
	empty := true // no word on line yet
	for _, word := range strings.Fields(text) {
		wn := utf8.RuneCountInString(word)
		if !empty && n+1+wn > width {
			lines = append(lines, line)
			line, n, empty = rest, utf8.RuneCountInString(rest), true
		}
		if !empty {
			line, n = line+" ", n+1
		}
		for n+wn > width { // longer than a whole line: cut it
			r := []rune(word)
			cut := max(width-n, 1)
			lines = append(lines, line+string(r[:cut]))
			word, wn = string(r[cut:]), wn-cut
			line, n = rest, utf8.RuneCountInString(rest)
		}
		line, n, empty = line+word, n+wn, false
	}
	if !empty || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}
