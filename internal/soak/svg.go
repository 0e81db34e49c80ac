package soak

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

const (
	svgWidth     = 900
	svgHeader    = 40 // the title above the panels
	svgFooter    = 24 // the x axis's name below them
	panelHeight  = 150
	plotLeft     = 70
	plotRight    = svgWidth - 20
	plotTopPad   = 26 // the panel's title and legend
	plotBotPad   = 24 // the x tick labels
	legendWidth  = 130
	maxSvgPoints = 2000 // per series; beyond it the series is bucketed
)

// series is one line of a panel. value reports false where the sample
// has no reading for it; samples with no agent never have one.
type series struct {
	name  string
	value func(Sample) (float64, bool)
	peak  bool // bucket by maximum, so spikes stay visible
}

type panel struct {
	title  string
	series []series
}

func always(v func(Sample) float64) func(Sample) (float64, bool) {
	return func(s Sample) (float64, bool) { return v(s), true }
}

// nodeRead is v where the sample read the node's CPU times (Sample.nodeRead).
func nodeRead(v func(Sample) float64) func(Sample) (float64, bool) {
	return func(s Sample) (float64, bool) { return v(s), s.nodeRead() }
}

// soakPanels are the figures drawn, top to bottom. Rates bucket by their
// mean, which is the rate over the bucket; the rest by their maximum.
func soakPanels() []panel {
	return []panel{
		{"memory (MiB)", []series{
			{"RSS", always(func(s Sample) float64 { return float64(s.RSSBytes) / mib }), true},
			{"RssAnon", always(func(s Sample) float64 { return float64(s.AnonBytes) / mib }), true},
			{"Go heap", always(func(s Sample) float64 { return float64(s.HeapBytes) / mib }), true},
			{"Go heap kept", func(s Sample) (float64, bool) { return float64(s.HeapKeptBytes) / mib, s.HeapKeptBytes > 0 }, true},
		}},
		{"agent CPU per exec (µs)", []series{
			{"CPU per exec", func(s Sample) (float64, bool) { return s.CPUPerExecUS, s.ExecRate > 0 }, false},
		}},
		{"execs/s", []series{
			{"execs/s", always(func(s Sample) float64 { return s.ExecRate }), false},
		}},
		{"store and WAL (MiB)", []series{
			{"store", always(func(s Sample) float64 { return float64(s.StoreBytes) / mib }), true},
			{"WAL", always(func(s Sample) float64 { return float64(s.WALBytes) / mib }), true},
		}},
		{"open files", []series{
			{"open files", always(func(s Sample) float64 { return float64(s.OpenFiles) }), true},
		}},
		{"goroutines", []series{
			{"goroutines", always(func(s Sample) float64 { return float64(s.Goroutines) }), true},
		}},
		{"ring drops, evictions, store rows dropped (cumulative)", []series{
			{"ring drops", always(func(s Sample) float64 { return float64(s.RingDrops) }), true},
			{"evictions", always(func(s Sample) float64 { return float64(s.Evictions) }), true},
			{"store rows dropped", always(func(s Sample) float64 { return float64(s.StoreDropped) }), true},
		}},
		{"query p99 (ms)", []series{
			{"query p99", func(s Sample) (float64, bool) { return s.QueryP99MS, s.Queries > 0 }, true},
		}},
		{"audit requests (cumulative)", []series{
			{"acked", always(func(s Sample) float64 { return float64(s.Acked) }), true},
			{"verified", always(func(s Sample) float64 { return float64(s.Verified) }), true},
			{"lost", always(func(s Sample) float64 { return float64(s.Lost) }), true},
		}},
		{"node CPU (% of all its CPUs)", []series{
			{"busy", nodeRead(func(s Sample) float64 { return s.NodeBusy * 100 }), false},
			{"stolen", nodeRead(func(s Sample) float64 { return s.NodeSteal * 100 }), false},
		}},
	}
}

// palette colours a panel's series in order.
func palette(i int) string {
	return [...]string{"#1f77b4", "#d62728", "#2ca02c"}[i%3]
}

// point is x in minutes since the start, y in the panel's unit.
type point struct{ x, y float64 }

// DrawSVG draws the soak as stacked panels sharing a time axis in
// minutes, one per figure, with the events as dashed vertical lines.
// A line breaks where no agent ran.
func DrawSVG(w io.Writer, samples []Sample, events []Event, title string) error {
	s := sortedSamples(samples)
	panels := soakPanels()
	xMax := 0.0
	for _, x := range s {
		xMax = math.Max(xMax, x.Elapsed.Minutes())
	}
	for _, e := range events {
		xMax = math.Max(xMax, e.Elapsed.Minutes())
	}
	// The time axis ends at the last reading, not at a round number,
	// so the run fills the width; its ticks are still round.
	_, xStep := niceAxis(xMax)
	xTop := xMax
	if !(xTop > 0) {
		xTop = 1
	}
	events = append([]Event(nil), events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].Elapsed < events[j].Elapsed })
	height := svgHeader + len(panels)*panelHeight + svgFooter

	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, "<title>%s</title>\n", escape(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", plotLeft, escape(title))
	for i, p := range panels {
		drawPanel(&b, p, s, events, svgHeader+i*panelHeight, xTop, xStep, i == 0)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">minutes since the start</text>`+"\n",
		(plotLeft+plotRight)/2, height-6)
	b.WriteString("</svg>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing soak SVG: %w", err)
	}
	return nil
}

func drawPanel(b *strings.Builder, p panel, s []Sample, events []Event, y0 int, xTop, xStep float64, labelEvents bool) {
	top, bottom := float64(y0+plotTopPad), float64(y0+panelHeight-plotBotPad)
	runs := make([][][]point, len(p.series))
	yMax := 0.0
	for i, sr := range p.series {
		runs[i] = downsample(seriesRuns(s, sr), sr.peak)
		for _, r := range runs[i] {
			for _, pt := range r {
				yMax = math.Max(yMax, pt.y)
			}
		}
	}
	yTop, yStep := niceAxis(yMax)
	px := func(x float64) float64 { return plotLeft + x/xTop*(plotRight-plotLeft) }
	py := func(y float64) float64 { return bottom - math.Max(0, math.Min(y, yTop))/yTop*(bottom-top) }

	fmt.Fprintf(b, `<g class="panel" data-title="%s">`+"\n", escape(p.title))
	fmt.Fprintf(b, `<text class="title" x="%d" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", plotLeft, y0+16, escape(p.title))
	fmt.Fprintf(b, `<rect class="plot" x="%d" y="%s" width="%d" height="%s" fill="none" stroke="#999"/>`+"\n",
		plotLeft, f1(top), plotRight-plotLeft, f1(bottom-top))
	for k := 0; float64(k)*yStep <= yTop*(1+1e-9); k++ {
		v := float64(k) * yStep
		y := f1(py(v))
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e5e5e5"/>`, plotLeft, y, plotRight, y)
		fmt.Fprintf(b, `<text class="ytick" x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", plotLeft-6, y, tick(v, yStep))
	}
	for k := 0; float64(k)*xStep <= xTop*(1+1e-9); k++ {
		v := float64(k) * xStep
		x := f1(px(v))
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999"/>`, x, f1(bottom), x, f1(bottom+4))
		fmt.Fprintf(b, `<text class="xtick" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", x, f1(bottom+16), tick(v, xStep))
	}
	for i, e := range events {
		if e.Elapsed < 0 {
			continue // before the start, off the axis
		}
		x := px(e.Elapsed.Minutes())
		fmt.Fprintf(b, `<line class="event" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#555" stroke-dasharray="4 3"/>`+"\n",
			f1(x), f1(top), f1(x), f1(bottom))
		if labelEvents {
			// Three staggered rows keep close events' labels apart.
			anchor, dx := "start", 3.0
			if x > plotRight-80 {
				anchor, dx = "end", -3
			}
			fmt.Fprintf(b, `<text class="event-label" x="%s" y="%s" text-anchor="%s" font-size="10" fill="#555">%s</text>`+"\n",
				f1(x+dx), f1(top+10+float64(i%3)*11), anchor, escape(e.What))
		}
	}
	for i, sr := range p.series {
		for _, r := range runs[i] {
			pts := make([]string, len(r))
			for j, pt := range r {
				pts[j] = f1(px(pt.x)) + "," + f1(py(pt.y))
			}
			if len(r) == 1 {
				// A one-point polyline draws nothing; mark it.
				fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="1.5" fill="%s"/>`, f1(px(r[0].x)), f1(py(r[0].y)), palette(i))
			}
			fmt.Fprintf(b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`+"\n",
				escape(sr.name), palette(i), strings.Join(pts, " "))
		}
	}
	if len(p.series) > 1 {
		x := plotRight - len(p.series)*legendWidth
		for i, sr := range p.series {
			lx := x + i*legendWidth
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`, lx, y0+12, lx+18, y0+12, palette(i))
			fmt.Fprintf(b, `<text class="legend" x="%d" y="%d">%s</text>`+"\n", lx+22, y0+16, escape(sr.name))
		}
	}
	b.WriteString("</g>\n")
}

// seriesRuns are the series' points, split where it has no reading.
func seriesRuns(s []Sample, sr series) [][]point {
	var runs [][]point
	var cur []point
	for _, x := range s {
		v, ok := sr.value(x)
		if x.Agent == 0 || !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			if len(cur) > 0 {
				runs, cur = append(runs, cur), nil
			}
			continue
		}
		cur = append(cur, point{x.Elapsed.Minutes(), v})
	}
	if len(cur) > 0 {
		runs = append(runs, cur)
	}
	return runs
}

// downsample buckets runs of more than maxSvgPoints points in all into
// buckets of k consecutive points, never across a break: one point each,
// the highest when peak, else the mean.
func downsample(runs [][]point, peak bool) [][]point {
	n := 0
	for _, r := range runs {
		n += len(r)
	}
	if n <= maxSvgPoints {
		return runs
	}
	k := (n + maxSvgPoints - 1) / maxSvgPoints
	out := make([][]point, len(runs))
	for i, r := range runs {
		for j := 0; j < len(r); j += k {
			bucket := r[j:min(j+k, len(r))]
			p := bucket[0]
			if peak {
				for _, q := range bucket {
					if q.y > p.y {
						p = q
					}
				}
			} else {
				var sx, sy float64
				for _, q := range bucket {
					sx, sy = sx+q.x, sy+q.y
				}
				p = point{sx / float64(len(bucket)), sy / float64(len(bucket))}
			}
			out[i] = append(out[i], p)
		}
	}
	return out
}

// niceAxis rounds max up to an axis end whose step is 1, 2, 2.5 or 5
// times a power of ten, giving three to five tick labels from 0.
func niceAxis(max float64) (top, step float64) {
	if !(max > 0) || math.IsInf(max, 0) {
		return 1, 0.5
	}
	raw := max / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw*(1-1e-9) {
			break
		}
	}
	return math.Ceil(max/step-1e-9) * step, step
}

// tick writes v with as many decimals as the step needs.
func tick(v, step float64) string {
	d := 0
	for p := step; d < 9 && math.Abs(p-math.Round(p)) > 1e-9*math.Max(1, p); p *= 10 {
		d++
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// escape makes s safe as XML text or attribute; characters XML cannot
// hold become U+FFFD.
func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
