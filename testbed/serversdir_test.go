package testbed_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/coordtorture/coordtorture/testbed"
)

// From inside a nested module (prim, or prim's servertest module), the
// fetched builds are still the repository root's .servers: the root is the
// directory of the harness's go.mod, not of the nearest go.mod whose module
// path merely starts with the harness's.
func TestServersDirFromNestedModule(t *testing.T) {
	root := t.TempDir()
	nested := filepath.Join(root, "prim", "internal", "servertest")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, mod := range map[string]string{
		root:                        "github.com/coordtorture/coordtorture",
		filepath.Join(root, "prim"): "github.com/coordtorture/coordtorture/prim",
		nested:                      "github.com/coordtorture/coordtorture/prim/internal/servertest",
	} {
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+mod+"\n\ngo 1.26.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(testbed.EnvServersDir, "")
	t.Chdir(nested)
	if got, want := testbed.ServersDir(), filepath.Join(root, ".servers"); got != want {
		t.Fatalf("ServersDir() from %s = %s, want %s", nested, got, want)
	}
}
