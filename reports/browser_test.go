package reports_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/reports"
)

// chromium finds the headless chromium the test drives: $COORDTORTURE_CHROMIUM,
// else the tree scripts/fetch-chromium.sh (run by `make browser`) puts in
// $COORDTORTURE_SERVERS_DIR/chromium (default <repo>/.servers/chromium). A
// missing chromium fails the test, unless COORDTORTURE_SKIP_CHROMIUM=1.
func chromium(t *testing.T) string {
	t.Helper()
	if os.Getenv("COORDTORTURE_SKIP_CHROMIUM") == "1" {
		t.Skip("COORDTORTURE_SKIP_CHROMIUM=1")
	}
	if p := os.Getenv("COORDTORTURE_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("COORDTORTURE_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	dir := os.Getenv("COORDTORTURE_SERVERS_DIR")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = filepath.Join(d, ".servers")
				break
			}
			if filepath.Dir(d) == d {
				t.Fatalf("no go.mod above %s", wd)
			}
		}
	}
	tree := filepath.Join(dir, "chromium")
	m, err := os.ReadFile(filepath.Join(tree, "MANIFEST"))
	if err != nil || !bytes.Contains(m, []byte("\ncomplete: yes\n")) {
		t.Fatalf("no headless chromium in %s: run `make browser` (scripts/fetch-chromium.sh) to fetch Debian's, "+
			"or set COORDTORTURE_CHROMIUM to a chromium binary, or COORDTORTURE_SKIP_CHROMIUM=1 to skip this test", tree)
	}
	return filepath.Join(tree, "chromium")
}

// runChromium runs headless chromium on the page with args (--dump-dom,
// --screenshot=…) and returns its stdout and stderr. It runs in its own
// process group, killed whole when it ends or after 60 s, and its profile
// lives in a temporary directory.
func runChromium(t *testing.T, bin, page string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	profile := t.TempDir()
	all := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
		"--disable-background-networking", "--disable-component-update", "--disable-default-apps",
		"--disable-breakpad", "--mute-audio", "--hide-scrollbars",
		"--user-data-dir=" + profile, "--crash-dumps-dir=" + profile,
		"--enable-logging=stderr", "--v=0",
	}, args...)
	all = append(all, "file://"+page)
	cmd := exec.CommandContext(ctx, bin, all...)
	cmd.Dir = profile
	cmd.Env = append(os.Environ(), "HOME="+profile, "TMPDIR="+profile, "XDG_CONFIG_HOME="+profile, "XDG_CACHE_HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Start()
	if err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	pgid := cmd.Process.Pid
	err = cmd.Wait()
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // whatever chromium left behind
	if left := waitGroupGone(pgid, 5*time.Second); len(left) > 0 {
		t.Errorf("chromium left processes behind: %v", left)
	}
	t.Logf("chromium %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("chromium timed out after 60 s; stderr:\n%s", tail(stderr.String(), 40))
	}
	if err != nil {
		t.Fatalf("chromium: %v; stderr:\n%s", err, tail(stderr.String(), 40))
	}
	return stdout.String(), stderr.String()
}

// waitGroupGone waits until no live process is left in process group pgid
// and returns those still there after d (zombies do not count).
func waitGroupGone(pgid int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		var left []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// consoleErrors are the page's console messages and script errors in
// chromium's log (--enable-logging=stderr): the page logs nothing itself.
func consoleErrors(stderr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, ":CONSOLE") || strings.Contains(l, "Uncaught") {
			out = append(out, l)
		}
	}
	return out
}

// TestHTMLInChromium renders index.html in headless chromium and checks the
// DOM after the page's script ran: the verdict table, a timeline per
// scenario, no script errors, no script injected by the run's strings.
// COORDTORTURE_REPORT_SCREENSHOT=file.png also saves a screenshot.
func TestHTMLInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	r := richSample(t)
	if err := reports.WriteDir(dir, r); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "index.html")
	dom, stderr := runChromium(t, bin, index, "--dump-dom")

	if errs := consoleErrors(stderr); len(errs) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(errs, "\n"))
	}
	if !strings.Contains(dom, `<ul id="js-errors" hidden=""></ul>`) {
		t.Errorf("the page caught script errors: %s", between(dom, `<ul id="js-errors"`, "</ul>"))
	}
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Errorf("the page's script did not run to its end; DOM starts:\n%.2000s", dom)
	}
	if root := between(dom, "<html", ">"); strings.Contains(root, "data-pwned") {
		t.Errorf("a scenario name ran as a script: %s>", root)
	}
	table := between(dom, `<table class="verdicts" id="verdict-table">`, "</table>")
	if table == "" {
		t.Fatalf("no verdict table in the DOM:\n%.3000s", dom)
	}
	for i, o := range r.Outcomes {
		id := fmt.Sprintf("s%d", i+1)
		row := between(table, fmt.Sprintf(`<tr id="row-%s"`, id), "</tr>")
		if !strings.Contains(row, html.EscapeString(o.Scenario)) && !strings.Contains(row, escapeText(o.Scenario)) {
			t.Errorf("row %s lacks the scenario %q:\n%s", id, o.Scenario, row)
		}
		if !strings.Contains(row, fmt.Sprintf(`verdict">%s</span>`, o.Verdict)) {
			t.Errorf("row %s lacks the verdict %s:\n%s", id, o.Verdict, row)
		}
		for _, p := range o.Results {
			if !strings.Contains(row, fmt.Sprintf(`data-checker="%s"`, p.Checker)) {
				t.Errorf("row %s lacks property %s", id, p.Checker)
			}
		}
		svg := between(dom, fmt.Sprintf(`<svg class="timeline" id="tl-%s"`, id), "</svg>")
		if svg == "" {
			t.Errorf("no timeline SVG for %s", o.Scenario)
		} else if !strings.Contains(svg, `<rect class="lane`) {
			t.Errorf("timeline of %s has no lanes", o.Scenario)
		}
	}
	if n := strings.Count(dom, `<rect class="hold`); n < 100 {
		t.Errorf("only %d hold bars in the DOM", n)
	}

	// The checks above would see a broken page: the same page with an error.
	broken := filepath.Join(dir, "broken.html")
	b, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("</body>"), []byte("<script>undefinedFunction()</script></body>"), 1)
	if err := os.WriteFile(broken, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dom, stderr = runChromium(t, bin, broken, "--dump-dom")
	if len(consoleErrors(stderr)) == 0 || !strings.Contains(dom, "undefinedFunction is not defined") {
		t.Errorf("a script error went unnoticed: console %q, errors %s", consoleErrors(stderr), between(dom, `<ul id="js-errors"`, "</ul>"))
	}

	if shot := os.Getenv("COORDTORTURE_REPORT_SCREENSHOT"); shot != "" {
		abs, err := filepath.Abs(shot)
		if err != nil {
			t.Fatal(err)
		}
		runChromium(t, bin, index, "--screenshot="+abs, "--window-size=1400,2000")
		if _, err := os.Stat(abs); err != nil {
			t.Errorf("no screenshot: %v", err)
		}
	}
}

// escapeText escapes s as chromium serializes text: only &, < and >.
func escapeText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\u00a0", "&nbsp;").Replace(s)
}
