package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/testbed/docker"
)

// TestDockerProvider: `run --provider docker` runs a scenario with its
// servers in containers of the build's local image, and the report names the
// provider and the image. Skips only when no Docker engine is reachable.
func TestDockerProvider(t *testing.T) {
	b := docker.NeedImages(t, build())[0]
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"run", "--provider", "docker", "--server", b, "--duration", "2s", "--seed", "3",
		"--out", filepath.Join(dir, "d"), "fenced-lock/partition-client"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	rep, err := os.ReadFile(filepath.Join(dir, "d", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"provider": "docker"`, `"target": "` + docker.ImageOf(b) + `"`} {
		if !strings.Contains(string(rep), want) {
			t.Errorf("report.json lacks %s", want)
		}
	}
}
