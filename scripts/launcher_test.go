// Package scripts holds no Go code: this test checks what fetch-servers.sh
// leaves behind for a user, on the real fetched builds.
package scripts

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// TestLaunchersRunAServer: every fetched build has .servers/<build>/bin/
// launchers (fetch-servers.sh) a user can start by hand. The server launcher
// passes its arguments through (the server listens on the port it was given)
// and execs the server (the process started is the server, which exits 0
// after SHUTDOWN); the cli launcher talks to it; a launcher called through a
// symbolic link elsewhere still finds its tree.
func TestLaunchersRunAServer(t *testing.T) {
	for _, name := range testbed.Matrix() {
		t.Run(name, func(t *testing.T) {
			if name == testbed.CustomBuild {
				t.Skip("a binary of your own (" + testbed.EnvServerBin + ") has no launcher")
			}
			b, err := testbed.LookupBuild(name)
			if err != nil {
				t.Fatal(err)
			}
			server := filepath.Join(b.Root, "bin", b.Flavor+"-server")
			cli := filepath.Join(b.Root, "bin", b.Flavor+"-cli")
			for _, l := range []string{server, cli} {
				if _, err := os.Stat(l); err != nil {
					t.Fatalf("no launcher: %v (run `make servers`: it writes the launchers of trees fetched before they existed)", err)
				}
			}

			// Through a symbolic link in another directory, as from a PATH entry.
			link := filepath.Join(t.TempDir(), b.Flavor+"-server")
			if err := os.Symlink(server, link); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(link, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "v="+versionOf(b.Version)) {
				t.Fatalf("%s --version (a link to the launcher): %v\n%s", link, err, out)
			}

			dir := t.TempDir()
			port := freePort(t)
			cmd := exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "server.log"))
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the test's own process group
			}()

			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if reply, err := pingUntil(addr, done, 30*time.Second); err != nil || reply != "+PONG" {
				log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
				t.Fatalf("PING %s: %q, %v\nlauncher output:\n%s\nserver log:\n%s", addr, reply, err, stderr.String(), log)
			}
			// exec, not a child of the shell: the process started is the tree's
			// loader running the server.
			exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
			loader, lerr := filepath.EvalSymlinks(b.Loader)
			if err != nil || lerr != nil || exe != loader {
				t.Errorf("the launcher's process is %q (%v), want the tree's loader %q (%v)", exe, err, loader, lerr)
			}
			out, err = exec.Command(cli, "-p", strconv.Itoa(port), "ping").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "PONG" {
				t.Errorf("%s -p %d ping: %v: %q", cli, port, err, out)
			}
			if _, err := exec.Command(cli, "-p", strconv.Itoa(port), "shutdown", "nosave").CombinedOutput(); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) { // the cli may exit non-zero when the server goes away
					t.Fatal(err)
				}
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the server exited with %v after SHUTDOWN, want 0\n%s", err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the server is still running 30 s after SHUTDOWN NOSAVE")
			}
		})
	}
}

// versionOf is the upstream version of a Debian version: 5:8.0.2-3+deb13u3
// → 8.0.2, 8.1.1+dfsg1-3 → 8.1.1.
func versionOf(debian string) string {
	v := debian
	if i := strings.IndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	if i := strings.IndexAny(v, "-+~"); i >= 0 {
		v = v[:i]
	}
	return v
}

// freePort is a TCP port nothing listens on at the moment of the call.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pingUntil sends PING to addr until a reply comes, the process exits (done)
// or the time is up.
func pingUntil(addr string, done <-chan error, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		select {
		case err := <-done:
			return "", errors.Join(errors.New("the launcher exited before the server answered"), err)
		default:
		}
		reply, err := ping(addr)
		if err == nil || time.Now().After(deadline) {
			return reply, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ping(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// TestBuildListsAgree: the builds fetch-servers.sh can fetch, testbed's matrix
// and the matrix of prim's own tests (prim/internal/localserver, which cannot
// import testbed) name the same builds in the same order, so a build added to
// one is fetched, run by every test that iterates the matrix, and run by prim's
// own tests.
func TestBuildListsAgree(t *testing.T) {
	want := testbed.KnownBuilds()

	script, err := os.ReadFile("fetch-servers.sh")
	if err != nil {
		t.Fatal(err)
	}
	var fetched []string
	in := false
	for _, line := range strings.Split(string(script), "\n") {
		switch {
		case strings.HasPrefix(line, "builds=("):
			in = true
		case in && strings.TrimSpace(line) == ")":
			in = false
		case in:
			if f := strings.Fields(strings.Trim(strings.TrimSpace(line), `"`)); len(f) > 0 {
				fetched = append(fetched, f[0])
			}
		}
	}
	if !slices.Equal(fetched, want) {
		t.Errorf("fetch-servers.sh fetches %v, testbed's matrix is %v", fetched, want)
	}

	src, err := os.ReadFile("../prim/internal/localserver/localserver.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^var matrix = \[\]string\{(.*)\}$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("prim/internal/localserver/localserver.go: no `var matrix = []string{…}` line")
	}
	var local []string
	for _, q := range strings.Split(string(m[1]), ",") {
		s, err := strconv.Unquote(strings.TrimSpace(q))
		if err != nil {
			t.Fatalf("localserver's matrix: %q: %v", q, err)
		}
		local = append(local, s)
	}
	if !slices.Equal(local, want) {
		t.Errorf("prim/internal/localserver's matrix is %v, testbed's is %v", local, want)
	}
}
