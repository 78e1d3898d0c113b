package reports_test

import (
	"bytes"
	"container/heap"
	"fmt"
	"html"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
)

// simulate builds the history of procs processes contending for one lock
// for d: acquire (ok when free, else fail), a few writes, release. While a
// window of faults is open (the server paused) operations time out as info.
func simulate(seed uint64, procs int, d time.Duration, faults [][2]time.Duration) []history.Op {
	r := rand.New(rand.NewPCG(seed, 1))
	const ttl = 500 * time.Millisecond
	type step struct {
		inv, ret history.Op
	}
	paused := func(t int64) (bool, int64) {
		for _, f := range faults {
			if t >= int64(f[0]) && t < int64(f[1]) {
				return true, int64(f[1])
			}
		}
		return false, 0
	}
	lat := func() int64 { return int64(200*time.Microsecond) + r.Int64N(int64(3*time.Millisecond)) }
	var steps []step
	var freeAt int64    // the lock is free from then on
	var expiry int64    // the current lease's expiry
	token := int64(0)   // fencing counter
	next := &timeHeap{} // per process: next action time
	for p := 0; p < procs; p++ {
		heap.Push(next, procTime{p, r.Int64N(int64(20 * time.Millisecond))})
	}
	holding := make([]int64, procs) // token held, 0 none
	writes := make([]int, procs)
	for next.Len() > 0 {
		pt := heap.Pop(next).(procTime)
		p, t := pt.p, pt.t
		if t >= int64(d) {
			continue
		}
		if stalled, until := paused(t); stalled {
			f := history.FAcquire
			if holding[p] != 0 {
				f = history.FWrite
			}
			inv := history.Op{Process: p, Type: history.Invoke, F: f, Key: "lock", T: t}
			if f == history.FAcquire {
				inv.TTLMs = ttl.Milliseconds()
			} else {
				inv.Key, inv.Token = "resource", holding[p]
			}
			ret := min(t+int64(250*time.Millisecond), until)
			steps = append(steps, step{inv, history.Op{Process: p, Type: history.Info, Err: "i/o timeout", T: ret}})
			holding[p] = 0
			heap.Push(next, procTime{p, ret + r.Int64N(int64(10*time.Millisecond))})
			continue
		}
		l := lat()
		switch {
		case holding[p] == 0:
			inv := history.Op{Process: p, Type: history.Invoke, F: history.FAcquire, Key: "lock", TTLMs: ttl.Milliseconds(), T: t}
			if t >= freeAt || t >= expiry {
				token++
				holding[p], writes[p] = token, 1+r.IntN(3)
				freeAt, expiry = int64(history.Never), t+int64(ttl)
				steps = append(steps, step{inv, history.Op{Process: p, Type: history.OK, Token: token, Owner: fmt.Sprintf("o%d", token), T: t + l}})
				heap.Push(next, procTime{p, t + l + r.Int64N(int64(40*time.Millisecond))})
			} else {
				steps = append(steps, step{inv, history.Op{Process: p, Type: history.Fail, Err: "contended", T: t + l}})
				heap.Push(next, procTime{p, t + l + int64(5*time.Millisecond) + r.Int64N(int64(30*time.Millisecond))})
			}
		case writes[p] > 0:
			writes[p]--
			inv := history.Op{Process: p, Type: history.Invoke, F: history.FWrite, Key: "resource", Token: holding[p], T: t}
			steps = append(steps, step{inv, history.Op{Process: p, Type: history.OK, Seq: int64(len(steps)), T: t + l}})
			heap.Push(next, procTime{p, t + l + r.Int64N(int64(20*time.Millisecond))})
		default:
			inv := history.Op{Process: p, Type: history.Invoke, F: history.FRelease, Key: "lock", Token: holding[p], Owner: fmt.Sprintf("o%d", holding[p]), T: t}
			steps = append(steps, step{inv, history.Op{Process: p, Type: history.OK, Value: history.ValueReleased, T: t + l}})
			holding[p] = 0
			freeAt = t + l
			heap.Push(next, procTime{p, t + l + r.Int64N(int64(30*time.Millisecond))})
		}
	}
	var recs []history.Op
	for _, s := range steps {
		recs = append(recs, s.inv, s.ret)
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].T < recs[j].T })
	for i := range recs {
		recs[i].I = int64(i)
	}
	return recs
}

type procTime struct {
	p int
	t int64
}

type timeHeap []procTime

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].t < h[j].t || h[i].t == h[j].t && h[i].p < h[j].p }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(procTime)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// opsOf pairs a history's records into operations (for evidence).
func opsOf(t testing.TB, recs []history.Op) []history.Operation {
	h, err := history.New(recs)
	if err != nil {
		t.Fatal(err)
	}
	return h.Ops
}

// richSample is sample() plus realistic histories, nemesis events, evidence
// with operations, a porcupine visualization and hostile strings.
func richSample(t testing.TB) *reports.Run {
	r := sample()
	r.Started = time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	r.Command = "coordtorture run --duration 10s 'fenced-lock/*'"

	// A passing run with pause windows.
	d := 10 * time.Second
	var faults [][2]time.Duration
	var events []scenarios.EventLog
	for at := 1500 * time.Millisecond; at+800*time.Millisecond < d; at += 2300 * time.Millisecond {
		faults = append(faults, [2]time.Duration{at, at + 800*time.Millisecond})
		events = append(events, scenarios.EventLog{At: at, Name: "pause the server"},
			scenarios.EventLog{At: at + 800*time.Millisecond, Name: "heal pause the server"})
	}
	pass := r.Outcomes[0]
	pass.Scenario, pass.Clients, pass.Duration, pass.Events = "fenced-lock/pause-primary", 8, d, events
	pass.Records = simulate(1, 8, d, faults)
	pass.Ops = len(pass.Records) / 2

	// A failing run: a forced failover, evidence pointing at operations.
	fail := r.Outcomes[1]
	fail.Scenario, fail.Clients, fail.Duration = "fenced-lock/failover-forced", 6, d
	fail.Records = simulate(2, 6, d, [][2]time.Duration{{4 * time.Second, 4*time.Second + 300*time.Millisecond}})
	fail.Ops = len(fail.Records) / 2
	fail.Events = []scenarios.EventLog{
		{At: 3 * time.Second, Name: "cut replication n2↔n1"},
		{At: 4 * time.Second, Name: "SENTINEL FAILOVER (forced, replica behind)", Effect: "the new primary n2 took over 812 bytes behind the old one"},
		{At: 4500 * time.Millisecond, Name: "heal"},
		{At: 7 * time.Second, Name: "kill -9 the server", Err: "exit status 137 <unexpected>"},
	}
	ops := opsOf(t, fail.Records)
	var acq []history.Operation
	for _, o := range ops {
		if o.F == history.FAcquire && o.Type == history.OK && o.T > int64(4*time.Second) {
			acq = append(acq, o)
		}
	}
	if len(acq) < 4 {
		t.Fatalf("simulation too short: %d acquisitions", len(acq))
	}
	fail.Results[0].Result.Evidence = []models.Evidence{
		{Key: "resource", Msg: "write with token 7 accepted after token 9", Ops: []history.Operation{acq[0], acq[1]}},
		{Key: "resource", Msg: "a second owner's write was accepted", Ops: []history.Operation{acq[2]}},
	}
	fail.Results[0].Result.Violations = 5
	fail.Results[1].Result.Evidence = append(fail.Results[1].Result.Evidence,
		models.Evidence{Key: "lock", Msg: "token regressed", Ops: []history.Operation{acq[3]}})
	fail.Results[1].Result.Visualization = []byte("<!DOCTYPE html><html><body><p id=\"porcupine\">porcupine visualization</p></body></html>")

	// Hostile strings everywhere.
	hostile := &scenarios.Outcome{Scenario: `<script>document.documentElement.setAttribute("data-pwned","1")</script>/x`,
		Impl: `"><img src=x onerror=alert(1)>`, Build: "redis-8.0", Seed: 3, Verdict: scenarios.Unknown,
		Error:  `dial: "</pre><b>not bold</b> & <script>alert(1)</script>`,
		Events: []scenarios.EventLog{{At: time.Second, Name: `<svg onload=alert(1)>`, Err: `</title><script>alert(1)</script>`}},
		Results: []scenarios.PropertyResult{{Checker: "exclusion", Expect: "must hold", Verdict: scenarios.Unknown,
			Result: models.Result{Checker: "exclusion", Verdict: models.Unknown, Summary: `undecided: <i>not italic</i>`,
				Evidence: []models.Evidence{{Key: `k"><script>alert(1)</script>`, Msg: `</pre></details><script>alert(1)</script>`,
					Ops: []history.Operation{{Op: history.Op{Process: 0, Type: history.Info, F: "acquire", Key: `<b>k</b>`, T: 10}, Return: 20, Done: true}}}}}}},
		Records: []history.Op{{I: 0, Process: 0, Type: history.Invoke, F: "acquire", Key: `<b>k</b>`, T: 10},
			{I: 1, Process: 0, Type: history.Info, F: "acquire", Key: `<b>k</b>`, Err: `<script>alert(1)</script>`, T: 20}},
	}
	r.Outcomes = append(r.Outcomes, hostile)
	return r
}

func page(t *testing.T, r *reports.Run) string {
	t.Helper()
	var b bytes.Buffer
	if err := reports.WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestHTMLEscapes(t *testing.T) {
	p := page(t, richSample(t))
	for _, bad := range []string{"<script>document", "<script>alert", "<img src=x", "<svg onload", "<b>not bold", "<i>not italic", "<b>k</b>", `"><img`} {
		if strings.Contains(p, bad) {
			t.Errorf("page contains unescaped %q", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;document.documentElement.setAttribute(&#34;data-pwned&#34;,&#34;1&#34;)&lt;/script&gt;/x",
		"&lt;svg onload=alert(1)&gt;", "&lt;i&gt;not italic&lt;/i&gt;"} {
		if !strings.Contains(p, want) {
			t.Errorf("page lacks the escaped %q", want)
		}
	}
	if n := strings.Count(p, "<script"); n != 2 {
		t.Errorf("page has %d <script> elements, want only its own 2", n)
	}
}

func TestHTMLSelfContained(t *testing.T) {
	p := page(t, richSample(t))
	for _, bad := range []string{"http://", "https://", "url(", "@import", "<link", "<iframe", "<img", "<object", "<embed"} {
		if strings.Contains(p, bad) {
			t.Errorf("page refers outside itself: contains %q", bad)
		}
	}
	if m := regexp.MustCompile(`<[a-zA-Z][^<>]*\ssrc=`).FindString(p); m != "" {
		t.Errorf("page loads a resource: %s", m)
	}
	if !strings.Contains(p, "Content-Security-Policy") || !strings.Contains(p, "default-src 'none'") {
		t.Error("page lacks its content security policy")
	}
}

func TestHTMLVerdictsTimelinesHistograms(t *testing.T) {
	r := richSample(t)
	p := page(t, r)
	for i, o := range r.Outcomes {
		id := fmt.Sprintf("s%d", i+1)
		row := between(p, fmt.Sprintf(`id="row-%s"`, id), "</tr>")
		if row == "" {
			t.Fatalf("no verdict row for %s", o.Scenario)
		}
		if !strings.Contains(row, fmt.Sprintf(`data-verdict="%s"`, o.Verdict)) {
			t.Errorf("row %s lacks its verdict %s", id, o.Verdict)
		}
		for _, pr := range o.Results {
			if !strings.Contains(row, pr.Checker) || !strings.Contains(row, pr.Expect) {
				t.Errorf("row %s lacks property %s (%s)", id, pr.Checker, pr.Expect)
			}
		}
		if !strings.Contains(p, fmt.Sprintf(`<svg class="timeline" id="tl-%s"`, id)) {
			t.Errorf("no timeline for %s", id)
		}
	}
	sec := section(p, "s2")
	for _, want := range []string{`class="fault"`, `class="mark err"`, `class="evmark ev-fail" data-ev="s2-e1"`,
		`class="evmark ev-hazard"`, `id="s2-e1"`, `href="viz/fenced-lock__failover-forced.redislock.redis-8.0.token-order.html"`,
		`data-f="acquire"`, `data-f="write"`, `data-f="release"`, "p99", "5 violations in all"} {
		if !strings.Contains(p, want) && !strings.Contains(sec, want) {
			t.Errorf("failing scenario's section lacks %q", want)
		}
	}
	// cut replication … heal is one window; the failover is a marker line.
	if !strings.Contains(sec, "cut replication n2↔n1 – until 4.500s (heal)") {
		t.Error("the cut is not paired with the heal")
	}
	if !strings.Contains(sec, "SENTINEL FAILOVER (forced, replica behind) (effect: the new primary n2 took over 812 bytes behind the old one)</title><line") {
		t.Error("the failover is not a marker line saying its effect")
	}
	if !strings.Contains(sec, `<span class="effect">effect: the new primary n2 took over 812 bytes behind the old one</span>`) {
		t.Error("the event list does not say the failover's effect")
	}
	pass := section(p, "s1")
	if n := strings.Count(pass, `<rect class="fault"`); n != 4 {
		t.Errorf("pause-primary has %d fault windows, want 4", n)
	}
	if strings.Contains(pass, "Capped") {
		t.Error("a 10 s history should not be capped")
	}
}

// section is the scenario section of the outcome with that id.
func section(p, id string) string {
	m := regexp.MustCompile(`<section class="scenario[^"]*" id="` + id + `"`).FindStringIndex(p)
	if m == nil {
		return ""
	}
	return between(p[m[0]:], "<section", "</section>")
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	j := strings.Index(s[i:], to)
	if j < 0 {
		return s[i:]
	}
	return s[i : i+j]
}

func TestHTMLPassOnly(t *testing.T) {
	r := sample()
	r.Outcomes = r.Outcomes[:1]
	p := page(t, r)
	if !strings.Contains(p, `id="overall">PASS<`) {
		t.Error("overall verdict is not PASS")
	}
	for _, bad := range []string{`<details class="evidence"`, "viz/", `class="evmark`, "FAIL", "HAZARD", "Capped"} {
		if strings.Contains(p, bad) {
			t.Errorf("a passing run's page contains %q", bad)
		}
	}
	if !strings.Contains(p, `<svg class="timeline" id="tl-s1"`) || !strings.Contains(p, "No nemesis events.") {
		t.Error("a passing run still gets its timeline")
	}
	// An empty run renders too.
	if p := page(t, &reports.Run{}); !strings.Contains(p, `id="overall">PASS<`) {
		t.Error("empty run")
	}
}

func TestHTMLCaps(t *testing.T) {
	d := 90 * time.Second
	start := time.Now()
	recs := simulate(9, 16, d, nil)
	t.Logf("simulated %d records in %v", len(recs), time.Since(start).Round(time.Millisecond))
	if len(recs) < 4*reports.MaxTimelineBars {
		t.Fatalf("history too short to cap: %d records", len(recs))
	}
	var evs []scenarios.EventLog
	for i := 0; i < 2*reports.MaxEvents; i++ {
		evs = append(evs, scenarios.EventLog{At: time.Duration(i) * time.Second, Name: fmt.Sprintf("partition a client %d", i)})
	}
	o := &scenarios.Outcome{Scenario: "fenced-lock/long", Impl: "prim", Build: "redis-8.0", Verdict: scenarios.Pass,
		Duration: d, Clients: 16, Ops: len(recs) / 2, Records: recs, Events: evs}
	start = time.Now()
	p := page(t, &reports.Run{Outcomes: []*scenarios.Outcome{o}})
	t.Logf("%d records → %d KB page in %v", len(recs), len(p)/1024, time.Since(start).Round(time.Millisecond))
	bars := regexp.MustCompile(`<rect class="(hold|maybe|op) `).FindAllStringIndex(p, -1)
	if len(bars) > reports.MaxTimelineBars || len(bars) < reports.MaxTimelineBars/10 {
		t.Errorf("timeline draws %d bars, want at most %d (and not too few)", len(bars), reports.MaxTimelineBars)
	}
	if !strings.Contains(p, "Capped: ") {
		t.Error("the page does not say the timeline is capped")
	}
	if !strings.Contains(p, fmt.Sprintf("%d more nemesis events are neither drawn nor listed", reports.MaxEvents)) {
		t.Error("the page does not say the events are capped")
	}
	if len(p) > 4<<20 {
		t.Errorf("page is %d bytes", len(p))
	}
	// Many scenarios share the page's budget.
	n := 2*reports.MaxPageBars/reports.MaxTimelineBars + 1
	var short []history.Op // 16 processes, each holding its own lock 200 times
	for k := 0; k < 200; k++ {
		for p := 0; p < 16; p++ {
			t0 := int64(k)*int64(10*time.Millisecond) + int64(p)*1000
			key := fmt.Sprintf("lock%d", p)
			short = append(short,
				history.Op{Process: p, Type: history.Invoke, F: history.FAcquire, Key: key, TTLMs: 500, T: t0},
				history.Op{Process: p, Type: history.OK, Token: int64(k + 1), T: t0 + int64(time.Millisecond)},
				history.Op{Process: p, Type: history.Invoke, F: history.FRelease, Key: key, T: t0 + int64(6*time.Millisecond)},
				history.Op{Process: p, Type: history.OK, T: t0 + int64(7*time.Millisecond)})
		}
	}
	sort.SliceStable(short, func(i, j int) bool { return short[i].T < short[j].T })
	for i := range short {
		short[i].I = int64(i)
	}
	var many []*scenarios.Outcome
	for i := 0; i < n; i++ {
		many = append(many, &scenarios.Outcome{Scenario: fmt.Sprintf("fenced-lock/s%d", i), Impl: "prim", Build: "redis-8.0",
			Verdict: scenarios.Pass, Duration: 2 * time.Second, Records: short})
	}
	p = page(t, &reports.Run{Outcomes: many})
	if got := len(regexp.MustCompile(`<rect class="(hold|maybe|op) `).FindAllStringIndex(p, -1)); got > reports.MaxPageBars {
		t.Errorf("%d scenarios draw %d bars, more than %d", n, got, reports.MaxPageBars)
	}
	if got := strings.Count(p, "Capped: "); got != n {
		t.Errorf("%d of %d scenarios say they are capped", got, n)
	}
	// 41 long histories (more than the default suite's runs): the page
	// stays under 4 MB, so that runs/latest stays under 20 MB with the
	// histories (the old 60000-bar budget made 12 MB of HTML).
	var long []*scenarios.Outcome
	for i := 0; i < 41; i++ {
		long = append(long, &scenarios.Outcome{Scenario: fmt.Sprintf("fenced-lock/l%d", i), Impl: "prim", Build: "redis-8.0",
			Verdict: scenarios.Pass, Duration: d, Clients: 16, Ops: len(recs) / 2, Records: recs})
	}
	p = page(t, &reports.Run{Outcomes: long})
	t.Logf("41 long scenarios → %d KB page", len(p)/1024)
	if len(p) > 4<<20 {
		t.Errorf("41 scenarios make a page of %d bytes, more than 4 MB", len(p))
	}
}

func TestWriteDirHTMLAndViz(t *testing.T) {
	dir := t.TempDir()
	r := richSample(t)
	if err := reports.WriteDir(dir, r); err != nil {
		t.Fatal(err)
	}
	viz := reports.VisualizationFile(r.Outcomes[1], "token-order")
	b, err := os.ReadFile(filepath.Join(dir, viz))
	if err != nil || !strings.Contains(string(b), "porcupine visualization") {
		t.Fatalf("visualization not written: %v", err)
	}
	idx, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(idx), `href="`+viz+`"`) {
		t.Errorf("index.html does not link %s", viz)
	}
	// Every relative link of the page points at a file WriteDir wrote.
	for _, m := range regexp.MustCompile(`href="([^"#][^"]*)"`).FindAllStringSubmatch(string(idx), -1) {
		name, err := url.PathUnescape(html.UnescapeString(m[1]))
		if err != nil {
			t.Errorf("index.html links %s: %v", m[1], err)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
			t.Errorf("index.html links %s, which WriteDir did not write: %v", m[1], err)
		}
	}
	got := reports.VisualizationFile(r.Outcomes[2], "exclusion")
	if rest, ok := strings.CutPrefix(got, "viz/"); !ok || strings.ContainsAny(rest, `<>"/ &?#%`) {
		t.Errorf("unsafe visualization file name %q", got)
	}
}

// gridCells reads the scenario × implementation grid of a page: for each
// "scenario [impl]", its cell's class and link ("" when not run).
func gridCells(t *testing.T, p string) (impls []string, cells map[string][2]string) {
	t.Helper()
	g := between(p, `<table class="grid" id="grid">`, "</table>")
	if g == "" {
		t.Fatal("no scenario × implementation grid")
	}
	head := between(g, "<tr><th>scenario", "</tr>")
	head = head[strings.Index(head, "</th>")+5:]
	for _, m := range regexp.MustCompile(`<th(?: class="cmp")?>([^<]*)</th>`).FindAllStringSubmatch(head, -1) {
		impls = append(impls, html.UnescapeString(m[1]))
	}
	cells = map[string][2]string{}
	row := regexp.MustCompile(`<tr><th scope="row">([^<]*)</th>(.*?)</tr>`)
	cell := regexp.MustCompile(`<td class="([^"]*)"[^>]*>(?:<a href="([^"]*)")?`)
	for _, m := range row.FindAllStringSubmatch(g, -1) {
		cs := cell.FindAllStringSubmatch(m[2], -1)
		if len(cs) != len(impls) {
			t.Fatalf("grid row %s has %d cells for %d implementations", m[1], len(cs), len(impls))
		}
		for i, c := range cs {
			cells[html.UnescapeString(m[1])+" ["+impls[i]+"]"] = [2]string{c[1], c[2]}
		}
	}
	return impls, cells
}

// besidePrimRun is prim beside a peer and a mutant: prim passes (one run
// on two servers, one with a HAZARD), the others fail, one property is N/A.
func besidePrimRun() *reports.Run {
	prop := func(checker string, v scenarios.Verdict, summary string) scenarios.PropertyResult {
		return scenarios.PropertyResult{Checker: checker, Expect: "must hold", Verdict: v,
			Result: models.Result{Checker: checker, Summary: summary}}
	}
	out := func(sc, impl, build string, v scenarios.Verdict, props ...scenarios.PropertyResult) *scenarios.Outcome {
		return &scenarios.Outcome{Scenario: sc, Impl: impl, Build: build, Verdict: v, Results: props, Duration: time.Second,
			Records: []history.Op{{I: 0, Process: 0, Type: history.Invoke, F: "acquire", Key: "k", TTLMs: 500},
				{I: 1, Process: 0, Type: history.OK, Token: 1, T: 5}}}
	}
	return &reports.Run{Outcomes: []*scenarios.Outcome{
		out("fenced-lock/baseline", "prim", "redis-8.0", scenarios.Pass, prop("fenced-resource", scenarios.Pass, "ok")),
		out("fenced-lock/baseline", "redislock", "redis-8.0", scenarios.Pass, prop("fenced-resource", scenarios.Pass, "ok"),
			prop("token-order", scenarios.NA, "nothing to check: redislock hands out no fencing tokens")),
		out("fenced-lock/pause-client", "prim", "redis-8.0", scenarios.Pass, prop("fenced-resource", scenarios.Pass, "ok")),
		out("fenced-lock/pause-client", "prim", "valkey-8.1", scenarios.Hazard, prop("fenced-resource", scenarios.Hazard, "hazard shown")),
		out("fenced-lock/pause-client", "redislock", "redis-8.0", scenarios.Fail, prop("fenced-resource", scenarios.Fail, "stale write accepted"),
			prop("token-order", scenarios.NA, "nothing to check: redislock hands out no fencing tokens")),
		out("fenced-lock/pause-client", "mutant-resource-ignores-tokens", "redis-8.0", scenarios.Fail, prop("fenced-resource", scenarios.Fail, "stale write accepted")),
	}}
}

// TestHTMLBadgeIsOverall: the badge is the verdict that sets the exit
// status (prim's, beside peers and mutants), not the worst of the run, and
// the page says the others are a comparison.
func TestHTMLBadgeIsOverall(t *testing.T) {
	for _, r := range []*reports.Run{besidePrimRun(), sample(), richSample(t), {Outcomes: besidePrimRun().Outcomes[4:]}} {
		p := page(t, r)
		want := r.Overall()
		if !strings.Contains(p, fmt.Sprintf(`<span class="v %s" id="overall">%s</span>`, strings.ToLower(string(want)), want)) {
			t.Errorf("badge is not Overall() %s: %s", want, between(p, "<h1>", "</h1>"))
		}
		if !strings.HasPrefix(between(p, "<title>", "</title>"), "<title>coordtorture "+string(want)) {
			t.Errorf("title is not Overall() %s: %s", want, between(p, "<title>", "</title>"))
		}
		mixed := r.Overall() != r.Verdict()
		if mixed != strings.Contains(p, "comparison — does not set the verdict") {
			t.Errorf("overall %s, worst %s: the page says comparison: %v", r.Overall(), r.Verdict(), !mixed)
		}
	}
	r := besidePrimRun()
	if r.Overall() != scenarios.Hazard || r.Verdict() != scenarios.Fail {
		t.Fatalf("comparisonRun: overall %s, worst %s", r.Overall(), r.Verdict())
	}
	p := page(t, r)
	if why := between(p, `<p class="why" id="overall-why">`, "</p>"); !strings.Contains(why, "exit status (0)") || !strings.Contains(why, `their worst: <span class="v fail">FAIL</span>`) ||
		!strings.Contains(why, "(redislock, mutant-resource-ignores-tokens) ran beside prim") {
		t.Errorf("the page does not explain the badge: %s", why)
	}
	// The comparison's rows and sections are apart, after prim's, and labelled.
	cmp := between(p, `<tbody class="cmp">`, "</tbody>")
	if !strings.Contains(cmp, "comparison — does not set the verdict") || !strings.Contains(cmp, `id="row-s2"`) || strings.Contains(cmp, `id="row-s1"`) {
		t.Errorf("the comparison's rows are not apart:\n%s", cmp)
	}
	prim, others := strings.Index(p, `<h2 class="group" id="under-test">`), strings.Index(p, `<h2 class="group cmp" id="comparison">`)
	if prim < 0 || others < prim || section(p, "s2") == "" || strings.Index(p, section(p, "s2")) < others || strings.Index(p, section(p, "s4")) > others {
		t.Error("prim's sections do not come first, then the comparison's, under their headings")
	}
	if !strings.Contains(section(p, "s5"), `<span class="cmp-tag">comparison</span>`) || strings.Contains(section(p, "s4"), `cmp-tag`) {
		t.Error("a comparison section is not labelled as such (or prim's is)")
	}
}

// TestHTMLGrid: the grid has a row per scenario, a column per
// implementation (prim first, the comparison after, under its own header),
// and each cell is the worst verdict of the pair, linking to its section.
func TestHTMLGrid(t *testing.T) {
	r := besidePrimRun()
	p := page(t, r)
	impls, cells := gridCells(t, p)
	if want := []string{"prim", "redislock", "mutant-resource-ignores-tokens"}; !slices.Equal(impls, want) {
		t.Errorf("grid columns %q, want %q", impls, want)
	}
	if !strings.Contains(p, `<th class="group cmp" colspan="2">comparison — does not set the verdict</th>`) {
		t.Error("the grid does not head the comparison's columns as such")
	}
	want := map[string][2]string{
		"fenced-lock/baseline [prim]":                               {"pass", "#s1"},
		"fenced-lock/baseline [redislock]":                          {"pass cmp", "#s2"},
		"fenced-lock/baseline [mutant-resource-ignores-tokens]":     {"none", ""},
		"fenced-lock/pause-client [prim]":                           {"hazard", "#s4"}, // the worse of its two servers
		"fenced-lock/pause-client [redislock]":                      {"fail cmp", "#s5"},
		"fenced-lock/pause-client [mutant-resource-ignores-tokens]": {"fail cmp", "#s6"},
	}
	if !maps.Equal(cells, want) {
		t.Errorf("grid cells:\n got %v\nwant %v", cells, want)
	}
	for k, c := range cells {
		if id := strings.TrimPrefix(c[1], "#"); id != "" && section(p, id) == "" {
			t.Errorf("grid cell %s links to %s, which is no section", k, c[1])
		}
	}
	if !strings.Contains(between(p, `<table class="grid"`, "</table>"), "PASS <small>+1 N/A</small>") {
		t.Error("the grid does not count the N/A property of redislock's baseline")
	}
	// The table of contents links every section.
	toc := between(p, `<nav id="toc">`, "</nav>")
	for i := range r.Outcomes {
		if !strings.Contains(toc, fmt.Sprintf(`<a href="#s%d">`, i+1)) {
			t.Errorf("the table of contents lacks s%d", i+1)
		}
	}
	for _, a := range []string{`href="#verdicts"`, `href="#under-test"`, `href="#comparison"`} {
		if !strings.Contains(toc, a) || !strings.Contains(p, `id="`+strings.TrimPrefix(strings.Trim(a, `"`), `href="#`)+`"`) {
			t.Errorf("the table of contents lacks %s or its target", a)
		}
	}
}

// TestHTMLPassCollapsed: a run that passed has its section and its
// properties collapsed; any other is open.
func TestHTMLPassCollapsed(t *testing.T) {
	r := besidePrimRun()
	r.Outcomes = append(r.Outcomes, &scenarios.Outcome{Scenario: "fenced-lock/x", Impl: "prim", Build: "redis-8.0", Verdict: scenarios.Pass, Error: "the servers did not stop"})
	p := page(t, r)
	for i, o := range r.Outcomes {
		id := fmt.Sprintf("s%d", i+1)
		sec := section(p, id)
		open := strings.Contains(sec, `<details class="run" open>`)
		closed := strings.Contains(sec, `<details class="run">`)
		wantOpen := o.Verdict != scenarios.Pass || o.Error != ""
		if open == closed || open != wantOpen {
			t.Errorf("%s [%s] %s: section open %v, closed %v", o.Scenario, o.Impl, o.Verdict, open, closed)
		}
		row := between(p, `<tr id="row-`+id+`"`, "</tr>")
		if collapsed := strings.Contains(row, `<details class="props"><summary>`); collapsed == wantOpen {
			t.Errorf("%s [%s] %s: properties collapsed %v", o.Scenario, o.Impl, o.Verdict, collapsed)
		}
	}
}

// TestHTMLNotApplicable: N/A is a state of its own (not UNKNOWN's colour)
// with its reason in sight, also when the run's properties are collapsed.
func TestHTMLNotApplicable(t *testing.T) {
	p := page(t, besidePrimRun())
	row := between(p, `<tr id="row-s2"`, "</tr>")
	if !strings.Contains(row, `<li class="prop" data-checker="token-order"><span class="v na">N/A</span> <span class="checker">token-order</span> <span class="expect">(must hold)</span> <span class="summary">nothing to check: redislock hands out no fencing tokens</span>`) {
		t.Errorf("the N/A property is not shown as N/A with its reason:\n%s", row)
	}
	if !strings.Contains(row, `<summary>1 property held, 1 N/A (token-order: nothing to check: redislock hands out no fencing tokens)</summary>`) {
		t.Errorf("the collapsed properties do not show the N/A reason:\n%s", row)
	}
	css := between(p, "<style>", "</style>")
	na := regexp.MustCompile(`\.v\.na \{([^}]*)\}`).FindStringSubmatch(css)
	unk := regexp.MustCompile(`\.v\.unknown \{([^}]*)\}`).FindStringSubmatch(css)
	if na == nil || unk == nil || na[1] == unk[1] || strings.Contains(na[1], "var(--unknown)") {
		t.Errorf("N/A is not styled apart from UNKNOWN: na %q, unknown %q", na, unk)
	}
}

// TestHTMLClientPauses: a holder that invokes nothing for long is drawn as
// a pause on its lane (the part past its lease's end apart), a short gap is
// not, and a fault whose event names a client is drawn on that client's lane.
func TestHTMLClientPauses(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	var recs []history.Op
	add := func(p int, typ history.Type, f string, at int64, mod func(*history.Op)) {
		op := history.Op{Process: p, Type: typ, F: f, Key: "lock", T: at}
		if mod != nil {
			mod(&op)
		}
		recs = append(recs, op)
	}
	// proc 0: acquires at 100ms (500ms lease), pauses 750ms, writes at
	// 851ms: its lease ended at 600ms, during the pause.
	add(0, history.Invoke, history.FAcquire, ms(100), func(o *history.Op) { o.TTLMs = 500 })
	add(0, history.OK, history.FAcquire, ms(101), func(o *history.Op) { o.Token = 1 })
	// proc 1: acquires at 120ms, pauses 60ms, within its lease.
	add(1, history.Invoke, history.FAcquire, ms(120), func(o *history.Op) { o.TTLMs = 500 })
	add(1, history.OK, history.FAcquire, ms(121), func(o *history.Op) { o.Token = 2 })
	add(1, history.Invoke, history.FWrite, ms(181), func(o *history.Op) { o.Key, o.Token = "resource", 2 })
	add(1, history.OK, history.FWrite, ms(182), func(o *history.Op) { o.Key = "resource" })
	// proc 2: acquires and writes 5ms later (a gap below a twentieth of
	// the lease: no pause).
	add(2, history.Invoke, history.FAcquire, ms(190), func(o *history.Op) { o.TTLMs = 500 })
	add(2, history.OK, history.FAcquire, ms(191), func(o *history.Op) { o.Token = 3 })
	add(2, history.Invoke, history.FWrite, ms(196), func(o *history.Op) { o.Key, o.Token = "resource", 3 })
	add(2, history.OK, history.FWrite, ms(197), func(o *history.Op) { o.Key = "resource" })
	add(0, history.Invoke, history.FWrite, ms(851), func(o *history.Op) { o.Key, o.Token = "resource", 1 })
	add(0, history.OK, history.FWrite, ms(852), func(o *history.Op) { o.Key = "resource" })
	add(3, history.Invoke, history.FAcquire, ms(900), func(o *history.Op) { o.TTLMs = 500 })
	add(3, history.Fail, history.FAcquire, ms(901), nil)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].T < recs[j].T })
	for i := range recs {
		recs[i].I = int64(i)
	}
	o := &scenarios.Outcome{Scenario: "fenced-lock/pause-client", Impl: "prim", Build: "redis-8.0", Verdict: scenarios.Pass,
		Duration: time.Second, Records: recs, Events: []scenarios.EventLog{
			{At: 300 * time.Millisecond, End: 301 * time.Millisecond, Name: "partition a client (c3 cut from n1)", Kind: models.NemesisFault},
			{At: 700 * time.Millisecond, End: 701 * time.Millisecond, Name: "heal partition a client", Kind: models.NemesisHeal},
		}}
	p := page(t, &reports.Run{Outcomes: []*scenarios.Outcome{o}})
	sec := section(p, "s1")
	if strings.Contains(sec, `class="problem"`) {
		t.Fatal(between(sec, `<p class="problem">`, "</p>"))
	}
	bar := regexp.MustCompile(`<rect class="(pause[^"]*)" x="([^"]+)" y="([^"]+)" width="([^"]+)"[^>]*><title>([^<]*)</title>`)
	var got []string
	for _, m := range bar.FindAllStringSubmatch(sec, -1) {
		got = append(got, m[1]+" y="+m[3]+": "+html.UnescapeString(m[5]))
		if m[1] == "pause expired" && m[2] != "803.2" { // x at 600ms of 1s: 100 + 0.6 × 1172
			t.Errorf("the part of the pause past the lease starts at x %s, want 803.2 (600ms)", m[2])
		}
	}
	want := []string{
		// lanes are 16 high from y 34; a pause is 5 high, 3.5 below its lane's top.
		`pause y=37.5: proc 0 paused 750.00ms holding "lock": nothing invoked from 101.00ms to 851.00ms (its write); its lease ended at 600.00ms, during the pause`,
		`pause expired y=37.5: proc 0 paused 750.00ms holding "lock": nothing invoked from 101.00ms to 851.00ms (its write); its lease ended at 600.00ms, during the pause`,
		`pause y=53.5: proc 1 paused 60.00ms holding "lock": nothing invoked from 121.00ms to 181.00ms (its write)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("pauses:\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(sec, "2 client pauses drawn (1 past the lease&#39;s end)") {
		t.Errorf("the section does not say what the pauses are: %s", between(sec, `<p class="meta pauses">`, "</p>"))
	}
	// The partition of c3 is on proc 3's lane (y 34 + 3×16), from 300ms to 700ms.
	cf := regexp.MustCompile(`<rect class="cfault" x="([^"]+)" y="([^"]+)" width="([^"]+)" height="16"><title>([^<]*)</title>`).FindAllStringSubmatch(sec, -1)
	if len(cf) != 1 || cf[0][2] != "82" || !strings.Contains(html.UnescapeString(cf[0][4]), "proc 3's client c3: F1 at 300.00ms: partition a client (c3 cut from n1)") {
		t.Errorf("the client's partition is not drawn on its lane: %q", cf)
	}
}
