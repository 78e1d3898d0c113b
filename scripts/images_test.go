package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// TestBuildImagesRebuildsOnlyOnChange: build-images.sh makes an image from a
// copy of a fetched tree (under a repository of the test's own, so the real
// images are untouched), skips it when nothing changed, rebuilds it when a
// file of the tree changed (the tree-hash label follows), and the image runs
// the server as a non-root user.
func TestBuildImagesRebuildsOnlyOnChange(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker CLI: the images need a Docker engine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine reachable (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	name := testbed.Matrix()[0]
	if name == testbed.CustomBuild {
		t.Skip("a binary of your own has no tree to make an image of")
	}
	b, err := testbed.LookupBuild(name)
	if err != nil {
		t.Fatal(err)
	}
	servers := t.TempDir()
	if out, err := exec.Command("cp", "-a", b.Root, filepath.Join(servers, name)).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	repo := "coordtorture-test" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "")) + "-" + filepathBase(servers)
	image := repo + "/" + strings.Replace(name, "-", ":", 1)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
	build := func() string {
		t.Helper()
		cmd := exec.Command("./build-images.sh", name)
		cmd.Env = append(os.Environ(), "COORDTORTURE_SERVERS_DIR="+servers, "COORDTORTURE_IMAGE_REPO="+repo)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("build-images.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	label := func() string {
		out, err := exec.Command("docker", "image", "inspect", "-f", `{{index .Config.Labels "coordtorture.tree-hash"}} {{.Config.User}}`, image).CombinedOutput()
		if err != nil {
			t.Fatalf("inspect %s: %v %s", image, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := build(); !strings.Contains(out, image+" built") {
		t.Fatalf("first build did not build %s:\n%s", image, out)
	}
	first := label()
	if !strings.HasSuffix(first, " 999:999") {
		t.Errorf("the image's user: %q, want 999:999 (non-root)", first)
	}
	if out := build(); !strings.Contains(out, image+" is up to date") {
		t.Fatalf("an unchanged tree was rebuilt:\n%s", out)
	}
	f, err := os.OpenFile(filepath.Join(servers, name, "MANIFEST"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("# changed by the test\n")
	f.Close()
	if out := build(); !strings.Contains(out, image+" built") {
		t.Fatalf("a changed tree was not rebuilt:\n%s", out)
	}
	if second := label(); second == first {
		t.Errorf("the tree-hash label did not change: %s", second)
	}
	out, err := exec.Command("docker", "run", "--rm", image, b.Flavor+"-server", "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "v=") {
		t.Errorf("the image does not run its server: %v %s", err, out)
	}
	out, err = exec.Command("docker", "run", "--rm", "--entrypoint", "/usr/bin/"+b.Flavor+"-cli", image, "--version").CombinedOutput()
	if err != nil {
		t.Errorf("the cli does not run without the entrypoint (docker exec, healthchecks): %v %s", err, out)
	}
}

func filepathBase(p string) string { return strings.ToLower(filepath.Base(p)) }
