package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

const helperEnv = "COORDTORTURE_TESTBED_HELPER"

// TestHelperTopology is not a test: TestNoLeftovers runs the test binary again
// with helperEnv set, and this starts servers, reports them and then dies the way
// it is told to.
func TestHelperTopology(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for TestNoLeftovers")
	}
	out := os.Getenv(helperEnv + "_OUT")
	topo := testbed.Replicated(t, testbed.Matrix()[0], 1, 3)
	var lines []string
	for _, n := range append(topo.Nodes(), topo.Sentinels()...) {
		lines = append(lines, "pid "+strconv.Itoa(n.Pid()))
	}
	lines = append(lines, "dir "+topo.Dir())
	if err := os.WriteFile(out+".tmp", []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(out + ".go"); err == nil {
			break
		}
	}
	switch mode {
	case "panic":
		panic("helper panics on purpose")
	case "panic-goroutine": // no deferred cleanup runs at all
		go func() { panic("helper panics on purpose in a goroutine") }()
		time.Sleep(time.Minute)
	default: // wait to be killed by a signal
		time.Sleep(time.Minute)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// state is the field after the parenthesised command name; a zombie is dead
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestNoLeftovers checks that no server process or temp dir outlives the test
// binary, whether it panics, is interrupted (Ctrl-C, SIGTERM) or is killed -9.
func TestNoLeftovers(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		return
	}
	for _, mode := range []string{"panic", "panic-goroutine", "SIGINT", "SIGTERM", "SIGKILL"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperTopology$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperEnv+"_OUT="+out)
			var logs strings.Builder
			cmd.Stdout, cmd.Stderr = &logs, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var report []byte
			for deadline := time.Now().Add(60 * time.Second); ; {
				if b, err := os.ReadFile(out); err == nil {
					report = b
					break
				}
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					t.Fatalf("helper did not start its topology:\n%s", logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			var pids []int
			var dir string
			for _, line := range strings.Split(strings.TrimSpace(string(report)), "\n") {
				k, v, _ := strings.Cut(line, " ")
				if k == "pid" {
					p, _ := strconv.Atoi(v)
					pids = append(pids, p)
				} else {
					dir = v
				}
			}
			if len(pids) != 5 || dir == "" {
				t.Fatalf("bad helper report %q", report)
			}
			for _, p := range pids {
				if !alive(p) {
					t.Fatalf("server pid %d not running while the helper lives", p)
				}
			}
			if err := os.WriteFile(out+".go", nil, 0o644); err != nil {
				t.Fatal(err)
			}
			switch mode {
			case "SIGINT":
				_ = cmd.Process.Signal(syscall.SIGINT)
			case "SIGTERM":
				_ = cmd.Process.Signal(syscall.SIGTERM)
			case "SIGKILL":
				_ = cmd.Process.Kill()
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("helper exited with %v, want a failure exit\n%s", err, logs.String())
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, p := range pids {
				for alive(p) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if alive(p) {
					t.Errorf("server pid %d survived the helper (%s)", p, mode)
				}
			}
			if strings.HasPrefix(mode, "panic-goroutine") || mode == "SIGKILL" {
				// Nothing in the helper could run; the next testbed user sweeps.
				testbed.SweepStale()
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("temp dir %s survived the helper (%s): %v", dir, mode, err)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	build := testbed.Matrix()[0]
	t.Run("unknown build", func(t *testing.T) {
		_, err := testbed.NewStandalone(ctx, "redis-6.2")
		if !errors.Is(err, testbed.ErrUnknownBuild) || !strings.Contains(err.Error(), "redis-6.2") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("missing binary", func(t *testing.T) {
		t.Setenv(testbed.EnvServerBin, "/nonexistent/redis-server")
		_, err := testbed.NewStandalone(ctx, "")
		if !errors.Is(err, testbed.ErrBuildMissing) || !strings.Contains(err.Error(), "/nonexistent/redis-server") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("missing tree", func(t *testing.T) {
		t.Setenv(testbed.EnvServersDir, t.TempDir())
		_, err := testbed.NewStandalone(ctx, "redis-7.0")
		if !errors.Is(err, testbed.ErrBuildMissing) || !strings.Contains(err.Error(), "make servers") {
			t.Fatalf("got %v", err)
		}
	})
	for name, line := range map[string]string{
		"dies at start-up":   "no-such-directive yes",
		"port will not bind": "bind 192.0.2.1",
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := testbed.NewStandalone(ctx, build, testbed.WithConfig(line))
			var se *testbed.StartError
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a StartError", err)
			}
			if !strings.Contains(se.Server, "n1") || !strings.Contains(se.Command, "server.conf") || se.Log == "(log empty)" {
				t.Fatalf("error does not name server, command and log: %v", err)
			}
			if el := time.Since(start); el > 10*time.Second {
				t.Fatalf("failure took %v to report", el)
			}
			t.Logf("reported in %v: %v", time.Since(start), err)
		})
	}
	t.Run("bad shapes", func(t *testing.T) {
		if _, err := testbed.NewReplicated(ctx, build, 1, 2); err == nil {
			t.Fatal("2 sentinels accepted")
		}
		if _, err := testbed.NewReplicated(ctx, build, 0, 0); err == nil {
			t.Fatal("0 replicas accepted")
		}
		if _, err := testbed.NewIndependentSet(ctx, build, 0); err == nil {
			t.Fatal("empty set accepted")
		}
	})
}

// TestCustomBinary runs a user's own binary (here a wrapper around a fetched
// build) through COORDTORTURE_SERVER_BIN.
func TestCustomBinary(t *testing.T) {
	b, err := testbed.LookupBuild(testbed.Matrix()[0])
	if err != nil {
		t.Fatal(err)
	}
	if b.Loader == "" {
		t.Skip("already running a custom binary")
	}
	wrapper := filepath.Join(t.TempDir(), "my-redis-server")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --library-path %s %s \"$@\"\n", b.Loader, b.LibPath, b.Binary)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(testbed.EnvServerBin, wrapper)
	topo := testbed.Replicated(t, "", 1, 3)
	if topo.Build.Name != testbed.CustomBuild || topo.Build.Binary != wrapper {
		t.Fatalf("build %+v, want the wrapper", topo.Build)
	}
	c := mustClient(t, topo)
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}
