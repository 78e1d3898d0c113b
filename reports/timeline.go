package reports

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Timeline geometry (SVG user units; the SVG scales to the page width).
const (
	tlWidth  = 1300.0
	tlLeft   = 100.0 // lane labels left of it
	tlRight  = 1272.0
	tlTop    = 34.0 // fault labels (y 12) and evidence labels (y 27) above it
	tlLaneH  = 16.0
	tlBarH   = 10.0
	tlStripH = 3.0
	tlAxisH  = 26.0
	// tlMinW is the least width of a shape: shapes have their true width
	// (their stroke, which does not scale when zooming, keeps the shortest
	// ones in sight), but an SVG rect of width 0 is not drawn at all.
	tlMinW = 0.001
)

// timeline is the SVG of one scenario: a lane per process with its lock
// holds (and its other operations as a thin strip), its pauses and the
// faults aimed at its client, fault windows and events, and the operations
// of every violation. What moves when the page's script zooms the time axis
// (every shape between Left and Right) is drawn in a nested SVG whose
// viewBox the script changes; the labels and ticks outside it are placed
// again by the script from their data-x.
type timeline struct {
	ID      string
	W, H    float64
	Left    float64
	Right   float64
	Top     float64
	Bottom  float64
	End     int64 // the time at Right, ns
	Lanes   []tlLane
	Ticks   []tlTick
	Windows []tlShape
	// LaneWindows are faults aimed at one client (a partition of its link),
	// drawn on its process's lane.
	LaneWindows []tlShape
	Markers     []tlShape // X is the line's x; Y, H its extent
	Bars        []tlShape
	Marks       []tlMark
	Labels      []tlLabel
	Legend      []tlLegend
	Notes       []string
	Pauses      int    // client pauses drawn (among Bars)
	PauseNote   string // what the pauses are
}

// PlotW is the width of the zoomable plot.
func (t *timeline) PlotW() float64 { return t.Right - t.Left }

// tlLabel is the label of a fault event or a violation above the plot. X is
// the x of its line, where the script places it again when zooming; LX its
// place unzoomed. Labels closer than 20 units to the previous one of their
// row start Hidden.
type tlLabel struct {
	X, LX, Y float64
	Class    string
	Text     string
	Ref      string // a violation's evidence element
	Hidden   bool
}

type tlLane struct {
	Y, TextY float64
	Label    string
	Stripe   bool
}

type tlTick struct {
	X     float64
	Label string
}

type tlShape struct {
	X, Y, W, H float64
	Class      string
	Title      string
	Label      string
	LX, LY     float64
}

// tlMark is one evidence entry: a line at its first operation (its label
// is among the timeline's Labels), and a box around each of its operations.
type tlMark struct {
	Ref    string // the evidence element's id
	Class  string
	Title  string
	X      float64
	Top    float64
	Bottom float64
	Rects  []tlShape
}

type tlLegend struct {
	Class string
	Label string
}

// seg is one bar before layout, in history time (ns). Its title is only
// formatted if it is drawn (see describe).
type seg struct {
	lane       int
	group      int // bars merge only within a lane and a group
	class      string
	kind       byte   // 'h' hold, 'm' maybe held, 'o' other operation, 'p' pause
	key        string // the lock, for holds
	start, end int64
	n          int
	op         *history.Operation // the acquisition, or the operation
	reason     string             // why a hold ended; what ended a pause
	// pastLease is, for a pause the lease did not outlive, when the lease
	// ended (0 otherwise).
	pastLease int64
	from, to  int64 // the whole pause, for a pause
}

// describe is the bar's tooltip.
func (s *seg) describe(proc int) string {
	switch {
	case s.n > 1:
		what := "holds of " + strconv.Quote(s.key)
		switch s.kind {
		case 'm':
			what = "acquisitions of unknown outcome of " + strconv.Quote(s.key)
		case 'o':
			what = s.op.F + " " + s.op.Type.String() + " operations"
		case 'p':
			what = "pauses holding " + strconv.Quote(s.key)
			if s.class != "pause" {
				what += " that outlasted the lease"
			}
		}
		return fmt.Sprintf("proc %d: %d %s, %s – %s", proc, s.n, what, fmtNs(s.start), fmtNs(s.end))
	case s.kind == 'h':
		tok := ""
		if s.op.Token != 0 {
			tok = fmt.Sprintf(" token %d", s.op.Token)
		}
		d := fmt.Sprintf("proc %d holds %q%s: %s – %s (%s)", proc, s.key, tok, fmtNs(s.start), fmtNs(s.end), s.reason)
		if s.end <= s.start && s.reason == "ttl end" {
			d += ", empty: the lease expired before the acquisition returned"
		}
		return d
	case s.kind == 'p':
		d := fmt.Sprintf("proc %d paused %s holding %q: nothing invoked from %s to %s (its %s)",
			proc, fmtNs(s.to-s.from), s.key, fmtNs(s.from), fmtNs(s.to), s.reason)
		if s.pastLease > 0 {
			d += fmt.Sprintf("; its lease ended at %s, during the pause", fmtNs(s.pastLease))
		}
		return d
	case s.kind == 'm':
		return fmt.Sprintf("proc %d %s %q of unknown outcome (%s): maybe held %s – %s (ttl)", proc, s.op.F, s.key, s.op.Err, fmtNs(s.start), fmtNs(s.end))
	}
	return OpText(s.op)
}

func addSat(a, b int64) int64 {
	if b > 0 && a > history.Never-b {
		return history.Never
	}
	return a + b
}

func buildTimeline(id string, o *scenarios.Outcome, h *history.History, budget int) (*timeline, []pageEvent, int) {
	tl := &timeline{ID: "tl-" + id, W: tlWidth, Left: tlLeft, Right: tlRight, Top: tlTop}

	// The time range: the run, its history, its events.
	end := int64(o.Duration)
	if h.End > end {
		end = h.End
	}
	for _, ev := range o.Events {
		if int64(ev.At) > end {
			end = int64(ev.At)
		}
	}
	if end <= 0 {
		end = 1
	}
	tl.End = end
	x := func(t int64) float64 {
		if t < 0 {
			t = 0
		}
		if t > end {
			t = end
		}
		return tlLeft + float64(t)/float64(end)*(tlRight-tlLeft)
	}

	// Lanes: one per process, in order.
	procSet := map[int]bool{}
	nemesis := map[int]bool{} // the harness's own process: drawn as fault windows, not a lane
	for i := range h.Records {
		if h.Records[i].F == history.FNemesis {
			nemesis[h.Records[i].Process] = true
		}
	}
	for i := range h.Records {
		if !nemesis[h.Records[i].Process] {
			procSet[h.Records[i].Process] = true
		}
	}
	procs := make([]int, 0, len(procSet))
	for p := range procSet {
		procs = append(procs, p)
	}
	sort.Ints(procs)
	if len(procs) > MaxTimelineLanes {
		tl.Notes = append(tl.Notes, fmt.Sprintf("%d processes: only the first %d are drawn.", len(procs), MaxTimelineLanes))
		procs = procs[:MaxTimelineLanes]
	}
	lane := map[int]int{}
	for i, p := range procs {
		lane[p] = i
	}
	nl := max(len(procs), 1)
	tl.Bottom = tlTop + float64(nl)*tlLaneH
	tl.H = tl.Bottom + tlAxisH
	laneY := func(l int) float64 { return tlTop + float64(l)*tlLaneH }
	for i, p := range procs {
		y := laneY(i)
		tl.Lanes = append(tl.Lanes, tlLane{Y: y, TextY: y + 11, Label: fmt.Sprintf("proc %d", p), Stripe: i%2 == 1})
	}
	if len(procs) == 0 {
		tl.Lanes = append(tl.Lanes, tlLane{Y: tlTop, TextY: tlTop + 11, Label: "no operations"})
	}

	// Ticks.
	step := niceStep(float64(end), 12)
	for k := 0; float64(k)*step <= float64(end)*(1+1e-9); k++ {
		t := float64(k) * step
		tl.Ticks = append(tl.Ticks, tlTick{X: x(int64(t)), Label: fmtTick(t, step)})
	}

	// Holds, uncertain holds, other operations.
	segs, keys := holdSegments(h, lane, end)
	if len(keys) > 1 {
		for i, k := range keys {
			if i == 8 {
				tl.Legend = append(tl.Legend, tlLegend{Class: "", Label: fmt.Sprintf("… %d more keys (colours repeat)", len(keys)-8)})
				break
			}
			tl.Legend = append(tl.Legend, tlLegend{Class: fmt.Sprintf("hold k%d", i%8), Label: "held: " + k})
		}
	} else {
		tl.Legend = append(tl.Legend, tlLegend{Class: "hold k0", Label: "held (acquire ok → release invoked or ttl end)"})
	}
	tl.Legend = append(tl.Legend,
		tlLegend{Class: "maybe k0", Label: "maybe held (acquire outcome unknown, until ttl)"},
		tlLegend{Class: "op ok", Label: "other op ok"}, tlLegend{Class: "op fail", Label: "fail"}, tlLegend{Class: "op info", Label: "unknown"},
		tlLegend{Class: "fault", Label: "fault window"}, tlLegend{Class: "mark-key", Label: "fault event"},
		tlLegend{Class: "ev-key", Label: "violation (click: evidence)"})

	expired := 0
	for i := range segs {
		if segs[i].kind == 'p' {
			tl.Pauses += segs[i].n // the part of a pause past the lease is not one more
			if segs[i].class != "pause" {
				expired++
			}
		}
	}
	if tl.Pauses > 0 {
		tl.Legend = append(tl.Legend, tlLegend{Class: "pause", Label: "client pause (holding a lease, invoked nothing)"},
			tlLegend{Class: "pause expired", Label: "pause past the lease's end"})
		tl.PauseNote = fmt.Sprintf("%d client pause%s drawn (%d past the lease's end): a process that held a lease and invoked nothing for at least a twentieth of the lease, from its last completion to its next invocation (the history does not record pauses; these are its gaps).",
			tl.Pauses, pluralS(tl.Pauses), expired)
	}
	sort.SliceStable(segs, func(i, j int) bool {
		a, b := &segs[i], &segs[j]
		if a.lane != b.lane {
			return a.lane < b.lane
		}
		if a.group != b.group {
			return a.group < b.group
		}
		return a.start < b.start
	})
	drawn := segs
	if len(segs) > budget {
		// The smallest gap tolerance that brings the bars under the budget
		// (the count only falls as the tolerance grows): a binary search.
		spans := make([]span, len(segs))
		g := int32(0)
		for i := range segs {
			if i > 0 && (segs[i].lane != segs[i-1].lane || segs[i].group != segs[i-1].group) {
				g++
			}
			spans[i] = span{g, segs[i].start, segs[i].end}
		}
		lo, hi := int64(0), end
		for lo < hi {
			mid := lo + (hi-lo)/2
			if mergedCount(spans, mid) <= budget {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		tol := hi
		drawn = mergeSegs(segs, tol)
		tl.Notes = append(tl.Notes, fmt.Sprintf("Capped: %d holds and operations drawn as %d bars (at most %d per scenario on this page): bars of one lane and kind less than %s apart are merged; hover a bar for its count.",
			len(segs), len(drawn), budget, fmtNs(tol)))
	}
	for i := range drawn {
		s := &drawn[i]
		y := laneY(s.lane)
		hgt := tlBarH
		switch s.kind {
		case 'o':
			y += tlBarH + 2
			hgt = tlStripH
		case 'p':
			y += 3.5
			hgt = 5
		default:
			y++
		}
		x1, x2 := x(s.start), x(s.end)
		tl.Bars = append(tl.Bars, tlShape{X: x1, Y: y, W: max(x2-x1, tlMinW), H: hgt, Class: s.class, Title: s.describe(procs[s.lane])})
	}

	// Nemesis events: fault windows where a later event's name says it ends
	// the fault, marker lines otherwise. A fault whose name names clients
	// ("c3 cut from n1") is also drawn on their lanes.
	events, more := faultEvents(o.Events)
	var lastLabel float64
	label := func(x, y float64, text, cls, ref string) {
		l := tlLabel{X: x, LX: labelX(x), Y: y, Text: text, Class: cls, Ref: ref}
		if x-lastLabel < 20 {
			l.Hidden = true
		} else {
			lastLabel = x
		}
		tl.Labels = append(tl.Labels, l)
	}
	lastLabel = -1e9
	var pevs []pageEvent
	for _, f := range events {
		pe := pageEvent{ID: f.id, At: fmtNs(f.at), Name: f.name, Err: f.err, Effect: f.effect}
		if f.closes != "" {
			pe.Until = "ends " + f.closes
		}
		if f.closed {
			pe.Until = fmt.Sprintf("until %s (%s: %s)", fmtNs(f.end), f.closedBy, f.closedName)
		}
		pevs = append(pevs, pe)
		if f.closes != "" {
			continue // drawn as the right edge of its window
		}
		title := fmt.Sprintf("%s at %s: %s", f.id, fmtNs(f.at), f.name)
		if f.err != "" {
			title += " (error: " + f.err + ")"
		}
		if f.effect != "" {
			title += " (effect: " + f.effect + ")"
		}
		cls := ""
		if f.err != "" {
			cls = " err"
		}
		x1 := x(f.at)
		if f.closed {
			title += fmt.Sprintf(" – until %s (%s)", fmtNs(f.end), f.closedName)
			tl.Windows = append(tl.Windows, tlShape{X: x1, Y: 4, W: max(x(f.end)-x1, tlMinW), H: tl.Bottom - 4, Class: "fault" + cls, Title: title})
			for _, p := range clientsNamed(f.name) {
				if l, ok := lane[p]; ok {
					tl.LaneWindows = append(tl.LaneWindows, tlShape{X: x1, Y: laneY(l), W: max(x(f.end)-x1, tlMinW), H: tlLaneH,
						Class: "cfault" + cls, Title: fmt.Sprintf("proc %d's client c%d: %s", p, p, title)})
				}
			}
		} else {
			tl.Markers = append(tl.Markers, tlShape{X: x1, Y: 4, H: tl.Bottom - 4, Class: "mark" + cls, Title: title})
		}
		label(x1, 13, f.id, "flabel", "")
	}
	if more > 0 {
		tl.Notes = append(tl.Notes, fmt.Sprintf("%d more nemesis events are neither drawn nor listed.", more))
	}
	if len(tl.LaneWindows) > 0 {
		tl.Legend = append(tl.Legend, tlLegend{Class: "cfault", Label: "fault aimed at this client (its event names it)"})
	}

	// Violations.
	nev := 0
	lastLabel = -1e9
	for _, pr := range o.Results {
		if pr.Verdict == scenarios.Pass {
			continue
		}
		for k, e := range pr.Result.Evidence {
			if k == MaxEvidence {
				break
			}
			nev++
			if len(e.Ops) == 0 {
				continue
			}
			m := tlMark{Ref: fmt.Sprintf("%s-e%d", id, nev), Class: "ev-" + verdictClass(pr.Verdict), Top: 18, Bottom: tl.Bottom}
			first := history.Never
			for j := range e.Ops {
				op := &e.Ops[j]
				if op.T < first {
					first = op.T
				}
				if j >= MaxEvidenceOps {
					continue
				}
				l, ok := lane[op.Process]
				if !ok {
					continue
				}
				ret := op.Return
				if !op.Done || ret == history.Never {
					ret = end
				}
				x1, x2 := x(op.T), x(ret)
				m.Rects = append(m.Rects, tlShape{X: x1, Y: laneY(l) - 0.5, W: max(x2-x1, tlMinW), H: tlLaneH - 1, Title: OpText(op)})
			}
			m.X = x(first)
			label(m.X, 27, fmt.Sprintf("E%d", nev), "evlabel "+m.Class, m.Ref)
			msg := e.Msg
			if e.Key != "" {
				msg = fmt.Sprintf("key %q: %s", e.Key, msg)
			}
			m.Title = fmt.Sprintf("E%d %s %s: %s", nev, pr.Verdict, pr.Checker, msg)
			tl.Marks = append(tl.Marks, m)
		}
	}
	return tl, pevs, more
}

// clientRE finds the clients an event's name names: c0, c1, … (Peer).
var clientRE = regexp.MustCompile(`\bc(\d+)\b`)

// clientsNamed are the processes whose clients an event's name names, in
// order, once each.
func clientsNamed(name string) []int {
	var out []int
	for _, m := range clientRE.FindAllStringSubmatch(name, -1) {
		p, err := strconv.Atoi(m[1])
		if err == nil && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// labelX places a label right of a line at x, or left of it at the right
// edge of the plot.
func labelX(x float64) float64 {
	if x+2 > tlRight-16 {
		return x - 18
	}
	return x + 2
}

// holdSegments returns the bars of a history: for every ok acquisition the
// holder's validity window [return, min(release invoked, invoke + ttl,
// extended by renewals)), for every acquisition of unknown outcome
// [invoke, invoke + ttl), every other operation (not releases or
// acquisitions that failed) from invoke to completion, and every client
// pause: a process that holds a lease and invokes nothing for at least
// pauseMin of it (from its last completion to its next invocation; "pause"
// or, when the lease ended meanwhile, "pause expired"). It also returns the
// lock names in order of first acquisition (bars are coloured by lock).
func holdSegments(h *history.History, lane map[int]int, end int64) ([]seg, []string) {
	type lid struct {
		proc       int
		key, field string
	}
	type hold struct {
		seg
		deadline int64
	}
	type groupKey struct {
		kind      byte
		name, cls string
	}
	groups := map[groupKey]int{}
	group := func(k groupKey) int {
		g, ok := groups[k]
		if !ok {
			g = len(groups)
			groups[k] = g
		}
		return g
	}
	keyIdx := map[lid]int{} // (key, field) → index in keys
	var keys []string
	keyOf := func(op *history.Operation) (string, int) {
		i, ok := keyIdx[lid{0, op.Key, op.Field}]
		if !ok {
			name := op.Key
			if op.Field != "" {
				name += "#" + op.Field
			}
			i = len(keys)
			keyIdx[lid{0, op.Key, op.Field}] = i
			keys = append(keys, name)
		}
		return keys[i], i
	}
	var segs []seg
	open := map[lid]*hold{}
	holding := map[int]*hold{} // a process's last open hold
	lastRet := map[int]int64{} // a process's last completion
	closeHold := func(hd *hold, at int64, why string) {
		if holding[hd.op.Process] == hd {
			delete(holding, hd.op.Process)
		}
		hd.reason = why
		switch {
		case hd.deadline <= at && hd.deadline <= end:
			hd.reason = "ttl end"
		case end < at && end < hd.deadline:
			hd.reason = "end of the history"
		}
		hd.end = max(min(at, hd.deadline, end), hd.start)
		segs = append(segs, hd.seg)
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		l, drawn := lane[op.Process]
		id := lid{op.Process, op.Key, op.Field}
		if hd := holding[op.Process]; hd != nil && drawn {
			if last, ok := lastRet[op.Process]; ok && op.T-last >= pauseMin(hd.op.TTLMs) {
				// One pause, in two bars when the lease ended during it.
				p := seg{lane: l, group: group(groupKey{'p', hd.key, "pause"}), class: "pause", kind: 'p',
					key: hd.key, start: last, end: op.T, n: 1, op: hd.op, reason: op.F, from: last, to: op.T}
				if hd.deadline < op.T {
					p.pastLease = hd.deadline
					if hd.deadline > last {
						within := p
						within.end = hd.deadline
						segs = append(segs, within)
						p.start, p.n = hd.deadline, 0
					}
					p.class, p.group = "pause expired", group(groupKey{'p', hd.key, "pause expired"})
				}
				segs = append(segs, p)
			}
		}
		if op.Done && op.Return != history.Never {
			lastRet[op.Process] = op.Return
		} else {
			delete(lastRet, op.Process)
		}
		switch {
		case acquires[op.F]:
			if op.Type == history.Fail {
				continue
			}
			if prev := open[id]; prev != nil {
				closeHold(prev, op.T, "acquired again")
				delete(open, id)
			}
			if !drawn {
				continue
			}
			name, ki := keyOf(op)
			ttl := history.Never
			if op.TTLMs > 0 {
				ttl = addSat(op.T, op.TTLMs*1e6)
			}
			switch op.Type {
			case history.OK:
				hd := &hold{seg: seg{lane: l, group: group(groupKey{'h', name, ""}), class: holdClass[ki%8], kind: 'h',
					key: name, start: op.Return, n: 1, op: op}, deadline: ttl}
				open[id], holding[op.Process] = hd, hd
			case history.Info:
				if ttl == history.Never {
					continue
				}
				segs = append(segs, seg{lane: l, group: group(groupKey{'m', name, ""}), class: maybeClass[ki%8], kind: 'm',
					key: name, start: op.T, end: min(ttl, end), n: 1, op: op})
			}
		case op.F == history.FRenew:
			if hd := open[id]; hd != nil && op.Type == history.OK && op.TTLMs > 0 && op.T < hd.deadline {
				hd.deadline = max(hd.deadline, addSat(op.T, op.TTLMs*1e6))
			}
		case op.F == history.FRelease:
			if hd := open[id]; hd != nil {
				closeHold(hd, op.T, "released")
				delete(open, id)
			}
		default:
			if !drawn {
				continue
			}
			ret := op.Return
			if !op.Done {
				ret = end
			}
			cls := opClass[op.Type]
			segs = append(segs, seg{lane: l, group: group(groupKey{'o', op.F, cls}), class: cls, kind: 'o',
				start: op.T, end: ret, n: 1, op: op})
		}
	}
	rest := make([]*hold, 0, len(open))
	for _, hd := range open {
		rest = append(rest, hd)
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].start < rest[j].start })
	for _, hd := range rest {
		closeHold(hd, history.Never, "never released")
	}
	return segs, keys
}

// pluralS is the plural ending "s" unless n is 1.
func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// pauseMin is the shortest client pause drawn: a twentieth of the lease
// (25ms of the default 500ms lease), at least 1ms; 10ms when the lease is
// unknown.
func pauseMin(ttlMs int64) int64 {
	if ttlMs <= 0 {
		return 10e6
	}
	return max(ttlMs*1e6/20, 1e6)
}

var (
	holdClass  = [8]string{"hold k0", "hold k1", "hold k2", "hold k3", "hold k4", "hold k5", "hold k6", "hold k7"}
	maybeClass = [8]string{"maybe k0", "maybe k1", "maybe k2", "maybe k3", "maybe k4", "maybe k5", "maybe k6", "maybe k7"}
	opClass    = map[history.Type]string{history.OK: "op ok", history.Fail: "op fail", history.Info: "op info"}
)

// span is a bar reduced to what merging looks at: its lane and group
// (numbered) and its extent.
type span struct {
	g          int32
	start, end int64
}

// mergedCount is len(mergeSegs(segs, tol)), for the spans of segs.
func mergedCount(spans []span, tol int64) int {
	n := 0
	var g int32 = -1
	var end int64
	for _, s := range spans {
		if s.g == g && s.start <= addSat(end, tol) {
			end = max(end, s.end)
			continue
		}
		n++
		g, end = s.g, s.end
	}
	return n
}

// mergeSegs merges bars of one lane and group that are less than tol apart
// (segs sorted by lane, group and start).
func mergeSegs(segs []seg, tol int64) []seg {
	var out []seg
	for _, s := range segs {
		if n := len(out); n > 0 {
			c := &out[n-1]
			if c.lane == s.lane && c.group == s.group && s.start <= addSat(c.end, tol) {
				c.end = max(c.end, s.end)
				c.n += s.n
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// fault is one nemesis event, paired with the event that ends it.
type fault struct {
	id         string
	name       string
	lower      string
	at, end    int64
	err        string
	effect     string // what the event proved the fault did
	closed     bool   // a later event ended it: a window [at, end)
	closedBy   string // that event's id
	closedName string
	closes     string // this event ends that fault (its id)
}

// undoVerbs begin the name of an event that ends the fault named by the
// rest of its name ("heal partition a client" ends "partition a client",
// "resume the server" ends "pause the server").
var undoVerbs = []string{"heal ", "resume ", "restore ", "restart ", "continue ", "unpause ", "undo ", "end ", "stop ", "lift ", "clear "}

// networkWords mark faults that a bare "heal" (heal every link) ends.
var networkWords = []string{"partition", "cut", "isolate", "latency", "slow", "drop", "delay", "loss", "blackhole", "split", "link", "disconnect"}

// faultEvents pairs nemesis events: an event whose name is an undo verb and
// the name (or the object) of an earlier open fault ends it; a bare "heal"
// or "heal all" ends every open network fault. Other events stay markers.
func faultEvents(evs []scenarios.EventLog) ([]*fault, int) {
	more := 0
	if len(evs) > MaxEvents {
		more = len(evs) - MaxEvents
		evs = evs[:MaxEvents]
	}
	sorted := make([]scenarios.EventLog, len(evs))
	copy(sorted, evs)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At < sorted[j].At })
	var out []*fault
	var open []*fault
	end := func(f, by *fault) {
		f.closed, f.end, f.closedBy, f.closedName = true, by.at, by.id, by.name
		for i, g := range open {
			if g == f {
				open = append(open[:i], open[i+1:]...)
				break
			}
		}
	}
	for i, ev := range sorted {
		f := &fault{id: fmt.Sprintf("F%d", i+1), name: ev.Name, lower: strings.ToLower(strings.TrimSpace(ev.Name)), at: int64(ev.At), err: ev.Err, effect: ev.Effect}
		out = append(out, f)
		// Events recorded with their kind say what they do; older reports
		// only have names, and the rules below guess from them.
		switch ev.Kind {
		case models.NemesisFault:
			open = append(open, f)
			continue
		case models.NemesisHeal:
			var ended []string
			for _, g := range append([]*fault(nil), open...) {
				end(g, f)
				ended = append(ended, g.id)
			}
			f.closes = strings.Join(ended, ", ")
			continue
		case models.NemesisEvent:
			if ev.End > ev.At {
				f.closed, f.end, f.closedBy, f.closedName = true, int64(ev.End), f.id, "its completion"
			}
			continue
		}
		if f.lower == "heal" || f.lower == "heal all" || f.lower == "heal everything" || f.lower == "heal all links" {
			var ended []string
			for _, g := range append([]*fault(nil), open...) {
				for _, w := range networkWords {
					if strings.Contains(g.lower, w) {
						end(g, f)
						ended = append(ended, g.id)
						break
					}
				}
			}
			f.closes = strings.Join(ended, ", ") // none: a marker
			continue
		}
		matched := false
		for _, verb := range undoVerbs {
			rest, ok := strings.CutPrefix(f.lower, verb)
			if !ok || rest == "" {
				continue
			}
			for j := len(open) - 1; j >= 0; j-- {
				g := open[j]
				if g.lower == rest || strings.HasSuffix(g.lower, " "+rest) {
					end(g, f)
					f.closes = g.id
					matched = true
					break
				}
			}
			break
		}
		if !matched {
			open = append(open, f)
		}
	}
	return out, more
}
