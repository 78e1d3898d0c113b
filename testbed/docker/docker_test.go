package docker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// dockerBuild skips when no Docker engine is reachable (the only reason) and
// builds the build's local image (scripts/build-images.sh; a no-op when it is
// up to date).
func dockerBuild(t *testing.T) string {
	t.Helper()
	return NeedImages(t, testbed.Matrix()[0])[0]
}

// dockerLeft lists what is left on the engine with the run's label.
func dockerLeft(t *testing.T, run string) string {
	t.Helper()
	var left []string
	for _, kind := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
		args := append(kind, "-q", "--filter", "label="+LabelRun+"="+run)
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %v: %v %s", args, err, out)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			left = append(left, kind[0]+": "+s)
		}
	}
	return strings.Join(left, "; ")
}

// TestDockerReplicated runs a primary, two replicas and three sentinels in
// containers and drives the fault API through them: a client through the
// switchboard, a cut client link, pause and resume, a sentinel failover
// after the primary is killed, a restart without persistence (empty) and
// with AOF on the node's volume (data kept), a network disconnect. Close
// leaves no container, network or volume with the run's label.
func TestDockerReplicated(t *testing.T) {
	build := dockerBuild(t)
	ctx := context.Background()
	topo, err := testbed.NewReplicated(ctx, build, 2, 3, Provider(""), testbed.WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	run := topo.ContainerRun()
	closed := false
	t.Cleanup(func() {
		if !closed {
			topo.Close()
		}
		if left := dockerLeft(t, run); left != "" {
			t.Errorf("left after Close: %s", left)
		}
	})
	if !topo.InContainers() || !strings.HasPrefix(topo.Node("n1").Addr, topo.AnnounceHost()+":") || topo.AnnounceHost() == "127.0.0.1" {
		t.Fatalf("announced %s, gateway %s", topo.Node("n1").Addr, topo.AnnounceHost())
	}
	c, err := topo.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the switchboard: %v\n%s", err, topo.Logs(20))
	}
	if err := topo.WaitInSync(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// A cut client link: the client cannot reach the primary, a replica's
	// own link is untouched.
	if err := topo.Partition(testbed.ClientPeer, "n1"); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := c.Get(sctx, "k").Err(); err == nil {
		t.Error("GET answered across a cut client link")
	}
	cancel()
	if err := topo.HealAll(); err != nil {
		t.Fatal(err)
	}
	// Pause: the server answers nothing, and again once resumed.
	if err := topo.Pause("n2"); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	if err := topo.Node("n2").Admin().Ping(pctx).Err(); err == nil {
		t.Error("a paused container answered PING")
	}
	cancel()
	if err := topo.Resume("n2"); err != nil {
		t.Fatal(err)
	}
	if err := topo.Node("n2").Admin().Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after resume: %v", err)
	}
	// Sentinel failover.
	np, err := topo.FailoverSentinel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if np.Name == "n1" {
		t.Fatal("failover kept n1")
	}
	// Kill and restart without persistence: the node comes back empty.
	if err := topo.Kill("n1"); err != nil {
		t.Fatal(err)
	}
	if topo.Node("n1").Running() {
		t.Fatal("n1 runs after Kill")
	}
	if err := topo.Start(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	// With AOF on the node's volume, a killed node keeps its data.
	if err := topo.Restart(ctx, "n1", testbed.WithAOFOnRestart(true)); err != nil {
		t.Fatal(err)
	}
	n1 := topo.Node("n1").Admin()
	if err := n1.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := n1.Set(ctx, "kept", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := topo.Restart(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if v, err := n1.Get(ctx, "kept").Result(); err != nil || v != "1" {
		t.Errorf("after a restart with AOF on the volume: %q %v", v, err)
	}
	if err := topo.Restart(ctx, "n1", testbed.WithAOFOnRestart(false)); err != nil {
		t.Fatal(err)
	}
	// Disconnect: nothing reaches the node until Reconnect.
	if err := topo.Disconnect(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	if err := topo.Node("n3").Admin().Ping(dctx).Err(); err == nil {
		t.Error("a disconnected container answered PING")
	}
	cancel()
	if err := topo.Reconnect(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	if err := topo.Node("n3").Admin().Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after reconnect: %v", err)
	}
	// A clock offset is not available here.
	if err := topo.SetClockOffset(ctx, "n2", time.Second); !errors.Is(err, testbed.ErrNotInContainers) {
		t.Errorf("SetClockOffset: %v, want testbed.ErrNotInContainers", err)
	}
	closed = true
	if err := topo.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestDockerClusterAndIndependent: a cluster of three primaries with a
// replica each and an independent set of three, in containers: the cluster
// announces the switchboard's addresses, a cluster client works through
// them on every primary, and a cut client link to one node is felt there
// only.
func TestDockerClusterAndIndependent(t *testing.T) {
	build := dockerBuild(t)
	ctx := context.Background()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		topo := testbed.Cluster(t, build, 3, 1, Provider(""))
		t.Logf("docker cluster 3×1 ready in %v", time.Since(start).Round(time.Millisecond))
		c, err := topo.Client()
		if err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			k := "k" + strconv.Itoa(i)
			if err := c.Set(ctx, k, i, 0).Err(); err != nil {
				t.Fatalf("SET %s: %v", k, err)
			}
		}
		shards, err := topo.Node("n1").Admin().ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shards {
			for _, n := range s.Nodes {
				if n.Endpoint != topo.AnnounceHost() {
					t.Errorf("a shard node announces %s, not the switchboard's %s", n.Endpoint, topo.AnnounceHost())
				}
			}
		}
	})
	t.Run("independent", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		topo := testbed.IndependentSet(t, build, 3, Provider(""))
		t.Logf("docker independent set of 3 ready in %v", time.Since(start).Round(time.Millisecond))
		for _, n := range topo.Nodes() {
			c, err := topo.NodeClient(n.Name)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "k", n.Name, 0).Err(); err != nil {
				t.Fatalf("SET on %s: %v", n.Name, err)
			}
		}
		if err := topo.Isolate("r2"); err != nil {
			t.Fatal(err)
		}
		for _, n := range topo.Nodes() {
			c, _ := topo.NodeClient(n.Name)
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			v, err := c.Get(cctx, "k").Result()
			cancel()
			if n.Name == "r2" && err == nil {
				t.Error("r2 answered while isolated")
			}
			if n.Name != "r2" && (err != nil || v != n.Name) {
				t.Errorf("%s: %q %v", n.Name, v, err)
			}
		}
	})
}

// TestDockerInterrupt: a process holding docker topologies that gets SIGINT
// removes every container, network and volume it made before it exits (the
// testbed's own handler, as for local servers).
func TestDockerInterrupt(t *testing.T) {
	if os.Getenv("COORDTORTURE_DOCKER_INTERRUPT_CHILD") != "" {
		topo, err := testbed.NewStandalone(context.Background(), testbed.Matrix()[0], Provider(""))
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(3)
		}
		fmt.Println("READY", topo.ContainerRun())
		time.Sleep(time.Minute)
		os.Exit(4) // not reached: the parent interrupts
	}
	dockerBuild(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDockerInterrupt$", "-test.v")
	cmd.Env = append(os.Environ(), "COORDTORTURE_DOCKER_INTERRUPT_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	run := ""
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
			run = r
			break
		}
		if strings.HasPrefix(sc.Text(), "ERROR") {
			break
		}
	}
	if run == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the child did not start its topology")
	}
	if left := dockerLeft(t, run); !strings.Contains(left, "ps: ") {
		t.Fatalf("no container of the child's run before the interrupt: %q", left)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("the child exited with %v, want status 130 (SIGINT)", err)
	}
	if left := dockerLeft(t, run); left != "" {
		t.Errorf("left after SIGINT: %s", left)
	}
}

// TestSweepDocker: what a run whose process is gone left (its pid label names
// no process) is removed; what a live process's run holds is not.
func TestSweep(t *testing.T) {
	build := dockerBuild(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	mk := func(run string, pid int) {
		labels := []string{"--label", LabelRun + "=" + run, "--label", LabelPid + "=" + strconv.Itoa(pid), "--label", LabelHost + "=" + host}
		for _, args := range [][]string{
			append([]string{"create"}, append(labels, ImageOf(build))...),
			append([]string{"volume", "create"}, labels...),
			append([]string{"network", "create"}, append(labels, run)...),
		} {
			if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
				t.Fatalf("docker %v: %v %s", args, err, out)
			}
		}
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	stale, live := "sweeptest-stale-"+hex.EncodeToString(id[:]), "sweeptest-live-"+hex.EncodeToString(id[:])
	t.Cleanup(func() {
		cli, err := dockerClient(context.Background())
		if err == nil {
			_ = removeLabelled(context.Background(), cli, LabelRun+"="+live)
			_ = removeLabelled(context.Background(), cli, LabelRun+"="+stale)
		}
	})
	mk(stale, dead.Process.Pid)
	mk(live, os.Getpid())
	Sweep(context.Background())
	if left := dockerLeft(t, stale); left != "" {
		t.Errorf("the stale run's resources survived the sweep: %s", left)
	}
	if left := dockerLeft(t, live); strings.Count(left, ":") != 3 {
		t.Errorf("the live run's container, volume and network should stay: %q", left)
	}
}
