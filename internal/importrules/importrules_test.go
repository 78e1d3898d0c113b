// Package importrules checks the package boundaries of DESIGN.md with `go list -deps`.
package importrules

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/coordtorture/coordtorture"

// rules: package → dependency prefixes it must never pull in. A package that does
// not exist yet is skipped by name only (the layout grows issue by issue).
var rules = map[string][]string{
	"prim":    {"github.com/Shopify/toxiproxy", "github.com/testcontainers", "github.com/docker", "github.com/moby", "github.com/anishathalye/porcupine", "pgregory.net/rapid", "github.com/rs/zerolog", "github.com/prometheus", module + "/testbed", module + "/models", module + "/history", module + "/scenarios"},
	"models":  {"github.com/redis/go-redis", "net", module + "/testbed", module + "/prim"},
	"history": {"github.com/redis/go-redis", "net", module + "/testbed", module + "/prim"},
	"testbed": {module + "/prim", module + "/scenarios", module + "/models", "github.com/testcontainers", "github.com/docker", "github.com/moby"}, // the docker provider is testbed/docker: prim/internal/servertest imports testbed
}

func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for pkg, banned := range rules {
		if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
			continue
		}
		checked++
		cmd := exec.Command("go", "list", "-deps", "./"+pkg)
		cmd.Dir = root
		if pkg == "prim" { // a module of its own: listed from inside it
			cmd = exec.Command("go", "list", "-deps", ".")
			cmd.Dir = filepath.Join(root, "prim")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range banned {
				if dep == b || strings.HasPrefix(dep, b+"/") {
					t.Errorf("%s imports %s (banned: %s)", pkg, dep, b)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package of the layout found: the test runs in the wrong directory")
	}
}
