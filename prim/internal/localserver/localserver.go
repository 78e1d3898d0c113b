// Package localserver starts a local, standalone redis-server or valkey-server
// for prim's own tests: the examples and the white-box tests of package prim.
//
// prim's module cannot use the harness's testbed (real servers behind toxiproxy
// links): a test dependency of a module is a requirement in its go.mod, and so
// would join the module graph of every service that imports prim. This package
// needs nothing beyond the standard library. It finds the builds `make servers`
// fetched the way testbed does (COORDTORTURE_SERVERS_DIR, else .servers at the
// repository root; COORDTORTURE_SERVERS picks builds; COORDTORTURE_SERVER_BIN
// runs a binary of the user's own instead), so both modules test on the same
// servers. Tests that need faults, replication or Cluster live in the
// prim/internal/servertest module, which uses testbed.
package localserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The environment testbed reads too (see testbed/builds.go).
const (
	envServersDir = "COORDTORTURE_SERVERS_DIR"
	envServers    = "COORDTORTURE_SERVERS"
	envServerBin  = "COORDTORTURE_SERVER_BIN"
)

// matrix is testbed's build matrix, in its order.
var matrix = []string{"redis-7.0", "redis-8.0", "redis-8.6", "valkey-8.1", "valkey-9.1"}

// DefaultBuild is the build examples run on when the matrix has it.
const DefaultBuild = "redis-8.0"

// CustomBuild names the user's own binary (COORDTORTURE_SERVER_BIN).
const CustomBuild = "custom"

// Matrix returns the builds tests iterate over: COORDTORTURE_SERVERS's list,
// only CustomBuild when COORDTORTURE_SERVER_BIN is set, else every build.
func Matrix() []string {
	if os.Getenv(envServerBin) != "" {
		return []string{CustomBuild}
	}
	if v := os.Getenv(envServers); v != "" {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return append([]string(nil), matrix...)
}

// serversDir is where `make servers` put the builds.
func serversDir() string {
	if d := os.Getenv(envServersDir); d != "" {
		return d
	}
	dir, err := os.Getwd()
	for err == nil {
		// The repository root is the directory of the harness's go.mod
		// (prim's own go.mod names the module github.com/coordtorture/coordtorture/prim).
		if b, rerr := os.ReadFile(filepath.Join(dir, "go.mod")); rerr == nil &&
			slices.Contains(strings.Split(string(b), "\n"), "module github.com/coordtorture/coordtorture") {
			return filepath.Join(dir, ".servers")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ".servers"
}

// argv returns the command line that runs build's server with args.
func argv(build string, args ...string) ([]string, error) {
	if bin := os.Getenv(envServerBin); bin != "" && build == CustomBuild {
		return append([]string{bin}, args...), nil
	}
	root := filepath.Join(serversDir(), build)
	man := map[string]string{}
	f, err := os.Open(filepath.Join(root, "MANIFEST"))
	if err != nil {
		return nil, fmt.Errorf("localserver: build %s not fetched under %s (run `make servers`): %w", build, serversDir(), err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && !strings.HasPrefix(k, " ") {
			man[k] = strings.TrimSpace(v)
		}
	}
	if man["complete"] != "yes" || man["binary"] == "" || man["loader"] == "" {
		return nil, fmt.Errorf("localserver: build %s under %s is incomplete (run `make servers`)", build, serversDir())
	}
	libs := filepath.Join(root, "lib/x86_64-linux-gnu") + ":" + filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	return append([]string{filepath.Join(root, man["loader"]), "--library-path", libs, filepath.Join(root, man["binary"])}, args...), nil
}

// Server is a running server.
type Server struct {
	// Addr is the server's address (127.0.0.1:port).
	Addr string
	// Build is the build it runs.
	Build string

	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// Start starts a server of build on a free local port and waits until it
// answers PING. Close stops it.
func Start(ctx context.Context, build string) (*Server, error) {
	var last error
	for range 5 { // a port found free can be taken before the server binds it
		s, err := start(ctx, build)
		if err == nil {
			return s, nil
		}
		last = err
		var ae *argvError
		if errors.As(err, &ae) || ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

type argvError struct{ error }

func start(ctx context.Context, build string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "prim-localserver-")
	if err != nil {
		return nil, err
	}
	args, err := argv(build, "--port", port, "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--enable-debug-command", "yes", "--dir", dir,
		"--logfile", filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, &argvError{err}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		os.RemoveAll(dir)
		return nil, &argvError{fmt.Errorf("localserver: start %s: %w", build, err)}
	}
	s := &Server{Addr: "127.0.0.1:" + port, Build: build, cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ping(s.Addr) == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			s.Close()
			return nil, fmt.Errorf("localserver: %s exited during start-up: %s", build, strings.TrimSpace(string(log)))
		case <-ctx.Done():
			s.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("localserver: %s did not answer PING on %s in 20s", build, s.Addr)
		}
	}
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dir)
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}

// ping sends a RESP PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

// Servers are started from one OS thread that never exits, so Pdeathsig (sent
// when the starting thread dies) kills them only with the test process.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnCh {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, done: done}
	return <-done
}
