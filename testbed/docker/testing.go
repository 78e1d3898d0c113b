package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// NeedImages prepares a test that runs servers in containers: it skips t
// when no Docker engine is reachable (saying why), leaves out a binary of
// the user's own (testbed.CustomBuild, which has no image; it skips when
// nothing is left), and builds the local images of the others with the
// repository's scripts/build-images.sh (rebuilt only when a tree changed).
// It returns the builds whose images are there.
func NeedImages(t testing.TB, builds ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := Available(ctx)
	cancel()
	if err != nil {
		t.Skipf("the docker provider needs a Docker engine: %v", err)
	}
	var keep []string
	for _, b := range builds {
		if b != testbed.CustomBuild {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		t.Skip("a binary of your own (" + testbed.EnvServerBin + ") has no image")
	}
	script, err := buildScript()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, keep...).CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-images.sh %v: %v\n%s", keep, err, out)
	}
	return keep
}

// buildScript finds scripts/build-images.sh from the working directory up
// (a test runs in its package's directory).
func buildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "build-images.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", os.ErrNotExist
		}
		dir = up
	}
}
