package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestrictionOutsideImpl (review finding 2): a PATTERN@IMPL whose IMPL
// is not among --impl's runs nothing, and says so on one line, counted, in
// place of dropping the run silently; it is no error (make torture
// TORTURE_IMPL=redislock gives the suite's X@prim patterns). And X@IMPL as
// the one pattern where X cannot run (an external deployment) is refused
// with X's own reason, as X is.
func TestRestrictionOutsideImpl(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"run", "--server", build(), "--impl", "prim", "--duration", "1s", "--out", filepath.Join(dir, "a"),
		"latch/baseline", "ratelimit/fixed/baseline@ulule"}, &out, &errb)
	want := "coordtorture: skipped: ratelimit/fixed/baseline@ulule (ulule not in --impl prim): 1 scenario not run\n"
	if code != 0 || !strings.Contains(errb.String(), want) {
		t.Errorf("exit %d, stderr %q; want 0 and %q\n%s", code, errb.String(), want, out.String())
	}
	// Nothing else: the skip said, then that nothing runs (exit 2).
	errb.Reset()
	code = run([]string{"run", "--impl", "prim", "--duration", "1s", "--out", filepath.Join(dir, "b"), "ratelimit/fixed/baseline@ulule"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), want) {
		t.Errorf("alone: exit %d, stderr %q; want 2 and %q", code, errb.String(), want)
	}
	// Selected by another pattern too: it runs, nothing of it dropped.
	errb.Reset()
	skipped, only, err := implRestrictions([]string{"latch/baseline@redislock", "latch"})
	if err != nil {
		t.Fatal(err)
	}
	skippedRestrictions(&errb, []string{"latch/baseline@redislock", "latch"}, only, []string{"prim"}, "prim")
	if got := errb.String(); got != "coordtorture: skipped: latch/baseline@redislock (redislock not in --impl prim): 0 scenarios not run\n" || len(skipped) != 2 {
		t.Errorf("freed by another pattern: said %q", got)
	}

	// External: X@prim alone is refused as X alone is.
	said := func(pattern string) string {
		var out, errb bytes.Buffer
		if code := run([]string{"run", "--provider", "external", "--addr", "127.0.0.1:1", "--duration", "1s", "--out", filepath.Join(dir, "x"), pattern}, &out, &errb); code != 2 {
			t.Errorf("%s on an external deployment: exit %d, want 2", pattern, code)
		}
		return errb.String()
	}
	if bare, at := said("fenced-lock/kill-restart-noaof"), said("fenced-lock/kill-restart-noaof@prim"); bare != at || strings.Contains(at, "skipping") {
		t.Errorf("external: X says %q, X@prim says %q: want the same", bare, at)
	}
}

// TestRestrictionsSkippedOneLine: the default suite's X@prim patterns beside
// --impl redislock (make torture TORTURE_IMPL=redislock) are said on one
// line, counted.
func TestRestrictionsSkippedOneLine(t *testing.T) {
	pos := []string{"fenced-lock/baseline", "fenced-lock/reset-peer@prim", "fenced-lock/black-hole@prim", "latch/baseline@prim",
		"fenced-lock/lose-replies@prim", "fenced-lock/eviction@prim", "ratelimit/fixed/baseline@ulule"}
	_, only, err := implRestrictions(pos)
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	skippedRestrictions(&errb, pos, only, []string{"redislock"}, "redislock")
	want := "coordtorture: skipped: fenced-lock/reset-peer@prim, fenced-lock/black-hole@prim, latch/baseline@prim, fenced-lock/lose-replies@prim and 1 more (prim not in --impl redislock): 5 scenarios not run\n" +
		"coordtorture: skipped: ratelimit/fixed/baseline@ulule (ulule not in --impl redislock): 1 scenario not run\n"
	if errb.String() != want {
		t.Errorf("said\n%s\nwant\n%s", errb.String(), want)
	}
}
