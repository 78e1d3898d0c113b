package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Every server process is started from one goroutine locked to one OS thread that
// never exits, so PR_SET_PDEATHSIG (which fires when the *thread* that forked the
// child exits) kills the children exactly when the test binary dies, whatever way
// it dies (panic, test timeout, SIGKILL). Processes are also put in their own
// process group so Close can kill the loader and anything it started at once.
type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq

	liveMu    sync.Mutex
	liveProcs = map[*process]struct{}{}
	liveDirs  = map[string]struct{}{}
)

func spawner() {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for r := range spawnCh {
				r.done <- r.cmd.Start()
			}
		}()
		if !callerHandlesSignals.Load() {
			go handleSignals()
		}
		sweepStale()
	})
}

var callerHandlesSignals atomic.Bool

// CallerHandlesSignals tells the testbed that the program stops by itself on
// SIGINT and SIGTERM, closing every topology it opened (as scenarios.Run does
// when its context is cancelled): the testbed then installs no handler of its
// own, which would kill every server and exit (130, 143) before the program
// could report what ran. A process killed outright still takes its servers
// with it (PDEATHSIG) and leaves its temp dirs to the next run's sweep. Call
// it before the first server starts; afterwards it has no effect.
func CallerHandlesSignals() { callerHandlesSignals.Store(true) }

// handleSignals turns SIGINT/SIGTERM into a clean stop: every server is killed and
// every temp dir removed before the binary exits with the conventional status.
func handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	s := <-ch
	KillAll()
	code := 128 + int(s.(syscall.Signal))
	fmt.Fprintf(os.Stderr, "testbed: %v: stopped every server and removed its files\n", s)
	os.Exit(code)
}

// KillAll kills every server this process started and removes every temp dir.
// Topology.Close does this for one topology; this is the last-resort path.
func KillAll() {
	liveMu.Lock()
	procs := make([]*process, 0, len(liveProcs))
	for p := range liveProcs {
		procs = append(procs, p)
	}
	dirs := make([]string, 0, len(liveDirs))
	for d := range liveDirs {
		dirs = append(dirs, d)
	}
	liveMu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
		forgetDir(d)
	}
	closeAllNets()
}

const tempPrefix = "coordtorture-"

// newTempDir makes a directory named coordtorture-<pid>-* so a later run can tell
// whether its owner is still alive (sweepStale).
func newTempDir() (string, error) {
	spawner()
	d, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tempPrefix, os.Getpid()))
	if err != nil {
		return "", err
	}
	liveMu.Lock()
	liveDirs[d] = struct{}{}
	liveMu.Unlock()
	return d, nil
}

func forgetDir(d string) {
	liveMu.Lock()
	delete(liveDirs, d)
	liveMu.Unlock()
}

// SweepStale removes temp dirs left by processes that died without cleaning up
// (SIGKILL, power loss); their servers died with them (PDEATHSIG). It runs by
// itself when a process first uses the testbed.
func SweepStale() { sweepStale() }

func sweepStale() {
	ents, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, tempPrefix) {
			continue
		}
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(name, tempPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM) {
			continue // owner alive
		}
		_ = os.RemoveAll(filepath.Join(os.TempDir(), name))
	}
}

// server is a node's server: a local process, or a container (WithContainers).
type server interface {
	start() error
	exited() (bool, error)
	signal(s syscall.Signal) error
	kill()
	pid() int
	logTail(n int) string
	lastLogLine(substr string) string
	startupError(cause error) error
	label() string
}

func (p *process) label() string { return p.name }

// process is one running server (redis-server, valkey-server or a sentinel).
type process struct {
	name    string
	argv    []string
	env     []string
	dir     string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

func (p *process) start() error {
	spawner()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), p.env...)
	// stdout/stderr go to the log file too: a loader or linker error never reaches
	// the server's own logfile.
	f, err := os.OpenFile(p.logPath+".stdout", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, done: done}
	if err := <-done; err != nil {
		f.Close()
		return fmt.Errorf("testbed: %s: start %s: %w", p.name, strings.Join(p.argv, " "), err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.done = make(chan struct{})
	p.exitErr = nil
	d := p.done
	p.mu.Unlock()
	liveMu.Lock()
	liveProcs[p] = struct{}{}
	liveMu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(d)
	}()
	return nil
}

// exited reports whether the process has exited, and how.
func (p *process) exited() (bool, error) {
	p.mu.Lock()
	d := p.done
	p.mu.Unlock()
	if d == nil {
		return true, errors.New("never started")
	}
	select {
	case <-d:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.exitErr
	default:
		return false, nil
	}
}

func (p *process) signal(s syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("testbed: %s is not running", p.name)
	}
	if done, _ := p.exited(); done {
		return fmt.Errorf("testbed: %s is not running", p.name)
	}
	return syscall.Kill(-cmd.Process.Pid, s)
}

// kill sends SIGKILL to the process group and waits for the exit (bounded).
func (p *process) kill() {
	p.mu.Lock()
	cmd, d := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT) // a stopped group dies only once continued on some kernels
	select {
	case <-d:
	case <-time.After(10 * time.Second):
	}
	liveMu.Lock()
	delete(liveProcs, p)
	liveMu.Unlock()
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// logTail returns the last n lines of the server log and its stdout/stderr.
func (p *process) logTail(n int) string {
	var b strings.Builder
	for _, path := range []string{p.logPath, p.logPath + ".stdout"} {
		data, err := os.ReadFile(path)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", filepath.Base(path), len(lines), strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(log empty)"
	}
	return b.String()
}

// lastLogLine is the last line of the server's log that contains substr ("" if none).
func (p *process) lastLogLine(substr string) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(data), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

// startupError describes a server that failed to come up: name, command, log.
func (p *process) startupError(cause error) error {
	return &StartError{Server: p.name, Command: strings.Join(p.argv, " "), Log: p.logTail(20), Err: cause}
}

// StartError is returned when a server does not come up. It names the server,
// the command line and the last lines of its log.
type StartError struct {
	Server  string
	Command string
	Log     string
	Err     error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("testbed: %s did not start: %v\ncommand: %s\n%s", e.Server, e.Err, e.Command, e.Log)
}

func (e *StartError) Unwrap() error { return e.Err }

// ipAlloc hands out loopback addresses 127.a.b.c (never 127.0.0.1, which is the
// clients' address). Each server binds its own address, so the switchboard can
// tell links apart by source address, and ports never collide across test
// binaries running in parallel: the address space is 2^24, the choice random, and
// a bind failure at start-up retries on a fresh address.
var (
	ipMu   sync.Mutex
	ipUsed = map[string]bool{}
)

func allocIP() string {
	ipMu.Lock()
	defer ipMu.Unlock()
	for {
		a := 1 + rand.IntN(254)
		ip := fmt.Sprintf("127.%d.%d.%d", a, rand.IntN(256), 1+rand.IntN(254))
		if ipUsed[ip] {
			continue
		}
		// Probe the ports a server will take; a leftover or foreign listener skips the address.
		ok := true
		for _, port := range []int{serverPort, serverPort + 10000} {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			ipUsed[ip] = true
			return ip
		}
	}
}

const serverPort = 6379

// waitFor polls cond every 20ms until it returns true, the context ends or the
// deadline passes; the last error from cond is part of the timeout error.
// finalError, returned by a waitFor condition, ends the wait at once with its
// error: the condition can no longer become true.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }

// When the caller's context ends first (a run ending mid-wait), the error
// says so and how long the wait had lasted, not that the timeout passed:
// "timed out after 30s" 250ms in would be false.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	parent, began := ctx, time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		var stop *exitedError
		var final *finalError
		if errors.As(err, &stop) {
			return err // the process is gone: waiting longer cannot help
		}
		if errors.As(err, &final) {
			return final.err // the condition can no longer become true
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if perr := parent.Err(); perr != nil {
				// The caller's context, not the timeout: a context error
				// (errors.Is context.Canceled or DeadlineExceeded) with the
				// condition's last answer.
				return fmt.Errorf("testbed: stopped %v into the wait (of %v allowed) for %s: the caller's context ended (%w); last seen: %v",
					time.Since(began).Round(time.Millisecond), timeout, what, perr, lastSeen(last))
			}
			if last != nil {
				return fmt.Errorf("testbed: timed out after %v waiting for %s: %w", timeout, what, last)
			}
			return fmt.Errorf("testbed: timed out after %v waiting for %s", timeout, what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastSeen is err, or "nothing yet" for a wait that saw no answer.
func lastSeen(err error) any {
	if err == nil {
		return "nothing yet"
	}
	return err
}
