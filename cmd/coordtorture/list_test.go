package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/coordtorture/coordtorture/scenarios"
)

// TestListFits120Columns (issue 32, item 8): every line of `coordtorture
// list` fits a 120-column terminal, and nothing is lost for it: each scenario
// starts a line with its name and topology, followed by its whole description
// and its properties, each under what is expected of it (must hold, may show
// hazard).
func TestListFits120Columns(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"list"}, &out, &errb); code != 0 {
		t.Fatalf("list: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for i, ln := range lines {
		if n := utf8.RuneCountInString(ln); n > 120 {
			t.Errorf("line %d is %d columns, more than 120:\n%s", i+1, n, ln)
		}
	}
	// The blocks: a line at column 0 opens a scenario's.
	blocks := map[string][]string{}
	var cur string
	for _, ln := range lines {
		if ln != "" && ln[0] != ' ' {
			cur = strings.Fields(ln)[0]
			blocks[cur] = append(blocks[cur], ln)
			continue
		}
		if cur != "" {
			blocks[cur] = append(blocks[cur], ln)
		}
	}
	all := scenarios.All()
	if len(blocks) != len(all) {
		t.Errorf("%d scenario blocks listed, want %d", len(blocks), len(all))
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, s := range all {
		b, ok := blocks[s.Name]
		if !ok {
			t.Errorf("%s: not listed", s.Name)
			continue
		}
		if head := norm(b[0]); head != s.Name+" "+norm(s.Topo.String()) {
			t.Errorf("%s: first line %q, want the name and the topology (%s)", s.Name, head, s.Topo)
		}
		text := norm(strings.Join(b[1:], " "))
		if !strings.Contains(text, norm(s.Summary)) {
			t.Errorf("%s: the description is not listed whole:\n%s\nwant %q", s.Name, strings.Join(b, "\n"), s.Summary)
		}
		must, may := mustMay(s)
		for _, want := range []struct {
			label  string
			checks []string
		}{{"must hold:", must}, {"may show hazard:", may}} {
			if len(want.checks) == 0 {
				if strings.Contains(text, want.label) {
					t.Errorf("%s: %q listed with no property under it", s.Name, want.label)
				}
				continue
			}
			if line := want.label + " " + strings.Join(want.checks, ", "); !strings.Contains(text, line) {
				t.Errorf("%s: want %q in:\n%s", s.Name, line, strings.Join(b, "\n"))
			}
		}
	}
}

// TestWrap: lines of at most the width, words kept whole unless one is longer
// than a line, the first and the following lines' prefixes, nothing lost.
func TestWrap(t *testing.T) {
	for _, c := range []struct {
		text        string
		width       int
		first, rest string
		want        []string
	}{
		{"a bb ccc dddd", 8, "> ", "  ", []string{"> a bb", "  ccc", "  dddd"}},
		{"×××××××××× x", 6, "", "", []string{"××××××", "×××× x"}},
		{"×××××××××× xyz", 6, "", "", []string{"××××××", "××××", "xyz"}},
		{"", 10, "  ", "  ", []string{"  "}},
		{"one", 10, "", "", []string{"one"}},
	} {
		got := wrap(c.text, c.width, c.first, c.rest)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("wrap(%q, %d) = %q, want %q", c.text, c.width, got, c.want)
		}
	}
}
