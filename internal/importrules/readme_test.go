package importrules

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeReplaceRecipe (issue 32, item 8): the README's recipe for using
// prim from a checkout before a tagged release works as written. The test
// takes the README's go-mod block word for word into the go.mod of a service
// beside a checkout (../coordtorture, a link to this repository), and builds
// the service offline, from the module cache alone; the block must name
// prim's real module path (prim/go.mod's).
func TestReadmeReplaceRecipe(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "\n```go-mod\n")
	block, _, closed := strings.Cut(after, "\n```")
	if !ok || !closed {
		t.Fatal("README.md has no ```go-mod block (the replace recipe for using prim from a checkout)")
	}
	primMod, err := os.ReadFile(filepath.Join(root, "prim", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(primMod), "\n")
	primPath := strings.TrimSpace(strings.TrimPrefix(first, "module "))
	for _, want := range []string{"require " + primPath + " ", "replace " + primPath + " => ../coordtorture/prim"} {
		if !strings.Contains(block, want) {
			t.Errorf("README's go-mod block lacks %q:\n%s", want, block)
		}
	}

	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "coordtorture")); err != nil {
		t.Fatal(err)
	}
	svc := filepath.Join(dir, "service")
	if err := os.Mkdir(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(svc, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/service\n\n"+consumerGo+"\n\n"+block+"\n")
	write("main.go", consumerMain)
	for _, args := range [][]string{{"mod", "tidy", "-e"}, {"build", "-o", os.DevNull, "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = svc
		// Offline, as TestPrimModuleGraph (see there).
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in a service with the README's go.mod lines: %v\n%s\ngo.mod:\n%s", strings.Join(args, " "), err, out, block)
		}
	}
}
