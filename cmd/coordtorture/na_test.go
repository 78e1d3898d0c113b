package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/testbed"
)

// TestMissingFeatureIsNA runs the hash-lease scenarios on the real
// redis-7.0, which has no hash-field expiry: each one that needs it is N/A
// naming the feature, not UNKNOWN, so `run` of the family there (its
// old-server scenario PASSes) and `matrix` over builds with and without the
// feature exit 0 (both exited 2); a run of N/A scenarios alone checked
// nothing: exit 2, saying so.
func TestMissingFeatureIsNA(t *testing.T) {
	if _, err := testbed.LookupBuild("redis-7.0"); err != nil {
		t.Skipf("needs redis-7.0 (no hash-field expiry): %v", err)
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	na := regexp.MustCompile(`hash-lease/baseline\s+prim\s+redis-7\.0\s+N/A`)
	code := run([]string{"run", "--server", "redis-7.0", "--duration", "4s", "--seed", "7", "--out", filepath.Join(dir, "family"), "hash-lease"}, &out, &errb)
	if code != 0 || !na.MatchString(out.String()) || !strings.Contains(out.String(), "not run: the server has no hash-field expiry") {
		t.Errorf("hash-lease on redis-7.0: exit %d, want 0 with hash-lease/baseline N/A naming the feature\n%s\n%s", code, out.String(), errb.String())
	}

	out.Reset()
	errb.Reset()
	code = run([]string{"run", "--server", "redis-7.0", "--duration", "4s", "--out", filepath.Join(dir, "alone"), "hash-lease/baseline"}, &out, &errb)
	if code != 2 || !strings.Contains(out.String(), "overall: UNKNOWN (every scenario run N/A: nothing was checked") {
		t.Errorf("hash-lease/baseline alone on redis-7.0: exit %d, want 2 saying nothing was checked\n%s\n%s", code, out.String(), errb.String())
	}

	// matrix: every fetched build; some must have the feature.
	withHFE := 0
	for _, b := range []string{"redis-8.0", "redis-8.6", "valkey-9.1"} {
		if _, err := testbed.LookupBuild(b); err == nil {
			withHFE++
		}
	}
	if withHFE == 0 {
		t.Skip("matrix: no fetched build has hash-field expiry")
	}
	out.Reset()
	errb.Reset()
	code = run([]string{"matrix", "--duration", "4s", "--seed", "7", "--out", filepath.Join(dir, "matrix"), "hash-lease/baseline"}, &out, &errb)
	if code != 0 || !na.MatchString(out.String()) || !regexp.MustCompile(`hash-lease/baseline\s+prim\s+\S+\s+PASS`).MatchString(out.String()) {
		t.Errorf("matrix hash-lease/baseline: exit %d, want 0 (N/A on redis-7.0, PASS where the feature exists)\n%s\n%s", code, out.String(), errb.String())
	}
}
