package reports_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	if want := fmt.Sprintf(`id="overall">%s</span>`, r.Overall()); !strings.Contains(dom, want) {
		t.Errorf("the rendered badge is not the overall verdict %s: %s", r.Overall(), between(dom, "<h1>", "</h1>"))
	}
	if grid := between(dom, `<table class="grid" id="grid">`, "</table>"); strings.Count(grid, `<a href="#s`) != len(r.Outcomes) {
		t.Errorf("the rendered grid does not link every run:\n%s", grid)
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

// zoomProbe runs after the page's script, in chromium: it zooms the
// timeline of s2 as a user would (Ctrl+wheel at its centre, a plain wheel,
// a double-click, a drag across a quarter of it, the reset button) and
// leaves what it saw, as JSON, in <html data-zoom-test>.
const zoomProbe = `<script>
(function () {
  var out = {};
  try {
    var svg = document.getElementById("tl-s2"), plot = svg.querySelector("svg.plot");
    var bar = document.querySelector(".zoombar[data-for='tl-s2']");
    var state = function () {
      return {vb: plot.getAttribute("viewBox"), zoom: svg.getAttribute("data-zoom"), view: bar.querySelector(".zview").textContent,
        ticks: Array.prototype.map.call(svg.querySelectorAll("g.ticks text"), function (t) { return t.textContent; }).join(" "),
        label: svg.querySelector("g.labels text[data-ev]").getAttribute("x")};
    };
    out.before = state();
    var r = plot.getBoundingClientRect(), cx = r.left + r.width / 2, cy = r.top + r.height / 2;
    svg.dispatchEvent(new WheelEvent("wheel", {deltaY: -500, ctrlKey: true, clientX: cx, clientY: cy, bubbles: true, cancelable: true}));
    out.wheel = state();
    var plain = new WheelEvent("wheel", {deltaY: -500, clientX: cx, clientY: cy, bubbles: true, cancelable: true});
    svg.dispatchEvent(plain);
    out.plainPrevented = plain.defaultPrevented;
    out.plain = state();
    svg.dispatchEvent(new MouseEvent("dblclick", {bubbles: true, clientX: cx, clientY: cy}));
    out.reset = state();
    svg.dispatchEvent(new MouseEvent("mousedown", {bubbles: true, cancelable: true, button: 0, clientX: r.left + r.width * 0.25, clientY: cy}));
    window.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: r.left + r.width * 0.5, clientY: cy}));
    out.brush = svg.querySelector("rect.brush").getAttribute("visibility") || "visible";
    window.dispatchEvent(new MouseEvent("mouseup", {bubbles: true, clientX: r.left + r.width * 0.5, clientY: cy}));
    out.drag = state();
    bar.querySelector(".zreset").click();
    out.button = state();
    var only = document.getElementById("only-bad");
    only.click();
    out.onlyBad = Array.prototype.filter.call(document.querySelectorAll("section.scenario, #verdict-table tr[data-verdict], #toc a[href^='#s']"),
      function (e) { return !e.hidden; }).map(function (e) { return e.id || e.getAttribute("href"); }).join(" ");
    only.click();
    bar.querySelector(".zev").click();
    out.violations = state();
    out.marks = Array.prototype.map.call(svg.querySelectorAll("g.evmark line"), function (l) { return +l.getAttribute("x1"); });
    bar.querySelector(".zreset").click();
  } catch (e) {
    out.error = String(e && e.stack || e);
  }
  document.documentElement.setAttribute("data-zoom-test", JSON.stringify(out));
})();
</script>`

type zoomState struct {
	VB, Zoom, View, Ticks, Label string
}

// viewBox parses a plot's viewBox: its x and width.
func viewBox(t *testing.T, vb string) (x, w float64) {
	t.Helper()
	f := strings.Fields(vb)
	if len(f) != 4 {
		t.Fatalf("viewBox %q", vb)
	}
	x, err1 := strconv.ParseFloat(f[0], 64)
	w, err2 := strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("viewBox %q", vb)
	}
	return x, w
}

// TestHTMLZoomInChromium zooms a timeline in headless chromium: Ctrl+wheel
// narrows the plot's viewBox around the pointer and redraws the ticks, a
// plain wheel leaves the page to scroll, a drag zooms into the time dragged
// across, a double-click and the reset button show the whole run again;
// no script error on the way. It also opens a collapsed (passed) run when
// the page is opened at its anchor.
func TestHTMLZoomInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	r := richSample(t)
	if err := reports.WriteDir(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(dir, "zoom.html")
	if err := os.WriteFile(probe, bytes.Replace(b, []byte("</body>"), []byte(zoomProbe+"</body>"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, stderr := runChromium(t, bin, probe, "--dump-dom", "--window-size=1400,2000")
	if errs := consoleErrors(stderr); len(errs) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(errs, "\n"))
	}
	if !strings.Contains(dom, `<ul id="js-errors" hidden=""></ul>`) {
		t.Errorf("the page caught script errors: %s", between(dom, `<ul id="js-errors"`, "</ul>"))
	}
	_, raw, _ := strings.Cut(dom, `data-zoom-test="`)
	raw, _, _ = strings.Cut(raw, `"`)
	if raw == "" {
		t.Fatalf("the probe did not run; DOM starts:\n%.2000s", dom)
	}
	var got struct {
		Before, Wheel, Plain, Reset, Drag, Button, Violations zoomState
		Marks                                                 []float64
		PlainPrevented                                        bool
		Brush, Error, OnlyBad                                 string
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(raw)), &got); err != nil {
		t.Fatalf("probe output %q: %v", raw, err)
	}
	if got.Error != "" {
		t.Fatalf("the probe failed: %s", got.Error)
	}
	t.Logf("zoom probe: %+v", got)
	x0, w0 := viewBox(t, got.Before.VB)
	if x0 != 100 || w0 != 1172 || got.Before.Zoom != "1" || got.Before.View != "the whole run" {
		t.Errorf("unzoomed: %+v", got.Before)
	}
	x, w := viewBox(t, got.Wheel.VB)
	if !(w < w0/2) || math.Abs(x+w/2-(x0+w0/2)) > 2 {
		t.Errorf("Ctrl+wheel up at the centre: viewBox %q from %q, want narrower around the centre", got.Wheel.VB, got.Before.VB)
	}
	if got.Wheel.Ticks == got.Before.Ticks || got.Wheel.View == got.Before.View || got.Wheel.Label == got.Before.Label || got.Wheel.Zoom == "1" {
		t.Errorf("zoomed, the ticks, the shown range or the labels did not follow: %+v", got.Wheel)
	}
	if got.PlainPrevented || got.Plain != got.Wheel {
		t.Errorf("a plain wheel zoomed (or kept the page from scrolling): %+v, prevented %v", got.Plain, got.PlainPrevented)
	}
	if got.Reset != got.Before || got.Button != got.Before {
		t.Errorf("double-click %+v, reset button %+v: want the whole run again %+v", got.Reset, got.Button, got.Before)
	}
	x, w = viewBox(t, got.Drag.VB)
	if math.Abs(x-(x0+w0/4)) > 2 || math.Abs(w-w0/4) > 2 || got.Brush != "visible" {
		t.Errorf("a drag across the second quarter: viewBox %q (want about %v 0 %v …), brush while dragging %q", got.Drag.VB, x0+w0/4, w0/4, got.Brush)
	}

	// "show only the runs that did not pass" hides s1's section, row and
	// entry in the contents.
	if got.OnlyBad != "#s2 #s3 row-s2 row-s3 s2 s3" {
		t.Errorf("only the runs that did not pass: %q shown", got.OnlyBad)
	}

	// "zoom to the violations" shows every violation's line, and not much more.
	x, w = viewBox(t, got.Violations.VB)
	if len(got.Marks) < 2 {
		t.Fatalf("too few violation marks to zoom to: %v", got.Marks)
	}
	lo, hi := slices.Min(got.Marks), slices.Max(got.Marks)
	if x > lo || x+w < hi || w >= w0/2 {
		t.Errorf("zoomed to the violations at %v: viewBox %q", got.Marks, got.Violations.VB)
	}

	// Opened at a passed run's anchor, the page opens its section.
	if !strings.Contains(section(page(t, r), "s1"), `<details class="run">`) {
		t.Fatal("s1 does not start collapsed")
	}
	dom, _ = runChromium(t, bin, filepath.Join(dir, "index.html")+"#s1", "--dump-dom")
	if !strings.Contains(between(dom, `<section class="scenario" id="s1">`, "<summary>"), `<details class="run" open="">`) {
		t.Errorf("opened at #s1, its section stays collapsed: %s", between(dom, `<section class="scenario" id="s1">`, "<summary>"))
	}
}
