package reports

import (
	"fmt"
	"math"
	"sort"

	"github.com/coordtorture/coordtorture/history"
)

// Histogram geometry.
const (
	hgWidth   = 380.0
	hgHeight  = 150.0
	hgLeft    = 40.0
	hgRight   = 356.0
	hgTop     = 12.0
	hgBase    = 122.0
	hgPerDec  = 4  // bins per decade
	hgMaxDec  = 10 // decades drawn at most
	hgMaxKind = 16 // operation kinds drawn at most
)

// histogram is the latency distribution (invoke → completion) of one
// operation kind, on a log scale, stacked by outcome.
type histogram struct {
	F                  string
	N                  int // completed
	OK, Fail, Info     int
	Never              int // never completed
	P50, P90, P99, Max string
	W, H               float64
	Left, Right, Base  float64
	YMax               int
	Bars               []tlShape
	Ticks              []tlTick
}

func buildHistograms(h *history.History) []*histogram {
	type sample struct {
		lat int64
		t   history.Type
	}
	byF := map[string][]sample{}
	never := map[string]int{}
	for i := range h.Ops {
		op := &h.Ops[i]
		if !op.Done {
			never[op.F]++
			if _, ok := byF[op.F]; !ok {
				byF[op.F] = nil // a kind whose operations all stayed in flight
			}
			continue
		}
		byF[op.F] = append(byF[op.F], sample{max(op.Return-op.T, 1), op.Type})
	}
	kinds := make([]string, 0, len(byF))
	for f := range byF {
		kinds = append(kinds, f)
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, b := len(byF[kinds[i]])+never[kinds[i]], len(byF[kinds[j]])+never[kinds[j]]
		if a != b {
			return a > b
		}
		return kinds[i] < kinds[j]
	})
	if len(kinds) > hgMaxKind {
		kinds = kinds[:hgMaxKind]
	}
	var out []*histogram
	for _, f := range kinds {
		ss := byF[f]
		hg := &histogram{F: f, N: len(ss), Never: never[f], W: hgWidth, H: hgHeight, Left: hgLeft, Right: hgRight, Base: hgBase}
		out = append(out, hg)
		if len(ss) == 0 {
			continue
		}
		lats := make([]int64, len(ss))
		lo, hi := int64(math.MaxInt64), int64(0)
		for i, s := range ss {
			lats[i] = s.lat
			lo, hi = min(lo, s.lat), max(hi, s.lat)
			switch s.t {
			case history.OK:
				hg.OK++
			case history.Fail:
				hg.Fail++
			default:
				hg.Info++
			}
		}
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		q := func(p float64) string { return fmtNs(lats[int(math.Ceil(p*float64(len(lats))))-1]) }
		hg.P50, hg.P90, hg.P99, hg.Max = q(0.5), q(0.9), q(0.99), fmtNs(lats[len(lats)-1])

		d0 := int(math.Floor(math.Log10(float64(lo))))
		d1 := int(math.Floor(math.Log10(float64(hi)))) + 1
		if d1-d0 > hgMaxDec {
			d0 = d1 - hgMaxDec // shorter latencies go into the first bin
		}
		nb := (d1 - d0) * hgPerDec
		counts := make([][3]int, nb)
		for _, s := range ss {
			b := int(math.Floor((math.Log10(float64(s.lat)) - float64(d0)) * hgPerDec))
			b = min(max(b, 0), nb-1)
			k := 2
			switch s.t {
			case history.OK:
				k = 0
			case history.Fail:
				k = 1
			}
			counts[b][k]++
		}
		for _, c := range counts {
			hg.YMax = max(hg.YMax, c[0]+c[1]+c[2])
		}
		bw := (hgRight - hgLeft) / float64(nb)
		classes := [3]string{"ok", "fail", "info"}
		for b, c := range counts {
			y := hgBase
			from := math.Pow(10, float64(d0)+float64(b)/hgPerDec)
			to := math.Pow(10, float64(d0)+float64(b+1)/hgPerDec)
			for k := 0; k < 3; k++ {
				if c[k] == 0 {
					continue
				}
				hgt := float64(c[k]) / float64(hg.YMax) * (hgBase - hgTop)
				y -= hgt
				hg.Bars = append(hg.Bars, tlShape{X: hgLeft + float64(b)*bw + 0.5, Y: y, W: max(bw-1, 0.5), H: hgt,
					Class: classes[k], Title: fmt.Sprintf("%s %s–%s: %d %s", f, fmtNs(int64(from)), fmtNs(int64(to)), c[k], classes[k])})
			}
		}
		for d := d0; d <= d1; d++ {
			hg.Ticks = append(hg.Ticks, tlTick{X: hgLeft + float64(d-d0)*hgPerDec*bw, Label: fmtDecade(d)})
		}
	}
	return out
}

// fmtDecade names 10^d nanoseconds: "1ns", "10µs", "100ms", "1s"…
func fmtDecade(d int) string {
	units := []string{"ns", "µs", "ms", "s"}
	u := min(max(d/3, 0), len(units)-1)
	v := math.Pow(10, float64(d-3*u))
	return fmt.Sprintf("%g%s", v, units[u])
}
