package models

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// TestCorpus runs the checkers on the hand-written histories of
// testdata/corpus, each with the verdict it must get (corpus.tsv): an
// adversarial history must FAIL its checker with every kind listed; a legal
// one must PASS every checker that applies to it. A history whose header
// states the checker's property is judged as a run and fencecheck judge it
// (Judge, with the history's proven effects): HAZARD or FAIL.
func TestCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "corpus")
	f, err := os.Open(filepath.Join(dir, "corpus.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 4 {
			t.Fatalf("corpus.tsv: want 4 tab-separated columns: %q", line)
		}
		file, checker, verdict, kinds := cols[0], cols[1], cols[2], cols[3]
		listed[file] = true
		t.Run(strings.TrimSuffix(file, ".jsonl"), func(t *testing.T) {
			h := readCorpus(t, filepath.Join(dir, file))
			c, ok := Lookup(checker)
			if !ok {
				t.Fatalf("unknown checker %q", checker)
			}
			if !c.Applies(h) {
				t.Fatalf("%s does not apply to the history", checker)
			}
			// A history's header may state the options its run used.
			var o Options
			var props []Property
			if h.Header != nil {
				var err error
				if props, o, err = FromHeader(h.Header); err != nil {
					t.Fatal(err)
				}
			}
			r := c.Check(h, o)
			got := r.Verdict.String()
			if k := slices.IndexFunc(props, func(p Property) bool { return p.Checker == checker }); k >= 0 {
				got = string(Judge(props[k], &r, Effects(h)))
			}
			if got != verdict {
				t.Fatalf("%s: got %s, want %s: %s\n%v", checker, got, verdict, r.Summary, r.Evidence)
			}
			if verdict == "PASS" {
				for _, c := range Applicable(h) {
					if r := c.Check(h, o); r.Verdict != Pass {
						t.Errorf("legal history: %s", r.String())
					}
				}
				return
			}
			for _, k := range strings.Split(kinds, ",") {
				if r.Kinds[k] == 0 {
					t.Errorf("%s: no %s violation reported; got %v (%s)", checker, k, r.Kinds, r.Summary)
				}
			}
			for _, e := range r.Evidence {
				if len(e.Ops) == 0 {
					t.Errorf("evidence without operations: %s", e.Msg)
				}
			}
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, p := range files {
		if !listed[filepath.Base(p)] {
			t.Errorf("%s is not listed in corpus.tsv", p)
		}
	}
	if len(files) == 0 || !slices.ContainsFunc(files, func(p string) bool { return strings.Contains(p, "legal") }) {
		t.Fatal("the corpus lost its histories")
	}
}

func readCorpus(t *testing.T, path string) *history.History {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := history.Read(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h
}
