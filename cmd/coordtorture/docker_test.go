package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
	"github.com/coordtorture/coordtorture/testbed/docker"
)

// TestDockerProvider: `run --provider docker` runs a scenario with its
// servers in containers of the build's local image, and the report names the
// provider and the image. Skips only when no Docker engine is reachable.
func TestDockerProvider(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := docker.Available(ctx)
	cancel()
	if err != nil {
		t.Skipf("the docker provider needs a Docker engine: %v", err)
	}
	b := build()
	if b == testbed.CustomBuild {
		t.Skip("a binary of your own (" + testbed.EnvServerBin + ") has no image")
	}
	if out, err := exec.Command("../../scripts/build-images.sh", b).CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-images.sh %s: %v\n%s", b, err, out)
	}
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
