package soak

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

type svgDoc struct {
	XMLName xml.Name   `xml:"svg"`
	Title   string     `xml:"title"`
	Panels  []svgPanel `xml:"g"`
}

type svgPanel struct {
	Title     string        `xml:"data-title,attr"`
	Texts     []svgText     `xml:"text"`
	Lines     []svgLine     `xml:"line"`
	Rects     []svgRect     `xml:"rect"`
	Polylines []svgPolyline `xml:"polyline"`
}

type svgText struct {
	Class string `xml:"class,attr"`
	Text  string `xml:",chardata"`
}

type svgLine struct {
	Class string `xml:"class,attr"`
	X1    string `xml:"x1,attr"`
}

type svgRect struct {
	Class  string  `xml:"class,attr"`
	Y      float64 `xml:"y,attr"`
	Height float64 `xml:"height,attr"`
}

type svgPolyline struct {
	Series string `xml:"data-series,attr"`
	Points string `xml:"points,attr"`
}

type panelWant struct {
	title  string
	series []string
}

func wantPanels() []panelWant {
	return []panelWant{
		{"memory (MiB)", []string{"RSS", "RssAnon", "Go heap"}},
		{"agent CPU per exec (µs)", []string{"CPU per exec"}},
		{"execs/s", []string{"execs/s"}},
		{"store and WAL (MiB)", []string{"store", "WAL"}},
		{"open files", []string{"open files"}},
		{"goroutines", []string{"goroutines"}},
		{"ring drops, evictions, store rows dropped (cumulative)", []string{"ring drops", "evictions", "store rows dropped"}},
		{"query p99 (ms)", []string{"query p99"}},
		{"audit requests (cumulative)", []string{"acked", "verified", "lost"}},
		{"node CPU (% of all its CPUs)", []string{"busy", "stolen"}},
	}
}

// drawn draws and parses the picture, failing on XML that is not
// well-formed.
func drawn(t *testing.T, samples []Sample, events []Event, title string) svgDoc {
	t.Helper()
	var buf bytes.Buffer
	if err := DrawSVG(&buf, samples, events, title); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	for {
		if _, err := dec.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
	var doc svgDoc
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := wantPanels()
	if len(doc.Panels) != len(want) {
		t.Fatalf("%d panels, want %d", len(doc.Panels), len(want))
	}
	for i, p := range doc.Panels {
		if p.Title != want[i].title || len(p.Texts) == 0 || p.Texts[0].Class != "title" || p.Texts[0].Text != p.Title {
			t.Errorf("panel %d titled %q (%+v), want %q", i, p.Title, p.Texts, want[i].title)
		}
	}
	return doc
}

// busy reads everything non-zero, growing, so every series has a line.
func busy(d time.Duration) Sample {
	s := flat(d)
	h := d.Hours()
	s.RingDrops, s.Evictions, s.StoreDropped = int64(h), int64(10*h), int64(2*h)
	s.Acked, s.Verified, s.Lost = int64(d/sampleEvery), int64(d/sampleEvery), 0
	s.Queries, s.QueryP99MS = 2, 1+h
	s.NodeBusy, s.NodeSteal = 0.3+0.1*h, 0.01
	return s
}

func points(t *testing.T, p svgPolyline) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, f := range strings.Fields(p.Points) {
		xs, ys, ok := strings.Cut(f, ",")
		x, errX := strconv.ParseFloat(xs, 64)
		y, errY := strconv.ParseFloat(ys, 64)
		if !ok || errX != nil || errY != nil {
			t.Fatalf("point %q in %q", f, p.Points)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

func TestDrawSVG(t *testing.T) {
	events := []Event{{Elapsed: time.Hour, What: "upgrade"}, {Elapsed: 2 * time.Hour, What: "disk full"}}
	doc := drawn(t, samplesOf(1, 0, 3*time.Hour, busy), events, `soak <6h> & "more"`)
	if doc.Title != `soak <6h> & "more"` {
		t.Errorf("title %q", doc.Title)
	}
	want := wantPanels()
	for i, p := range doc.Panels {
		count := map[string]int{}
		for _, pl := range p.Polylines {
			count[pl.Series]++
			if n := len(points(t, pl)); n != 3*360 {
				t.Errorf("%s: %s has %d points, want %d", p.Title, pl.Series, n, 3*360)
			}
		}
		for _, name := range want[i].series {
			if count[name] != 1 {
				t.Errorf("%s: %d polylines for %s, want 1", p.Title, count[name], name)
			}
		}
		if len(count) != len(want[i].series) {
			t.Errorf("%s: series %v, want %v", p.Title, count, want[i].series)
		}
		marks := 0
		for _, l := range p.Lines {
			if l.Class == "event" {
				marks++
			}
		}
		if marks != len(events) {
			t.Errorf("%s: %d event markers, want %d", p.Title, marks, len(events))
		}
		var ticks int
		for _, tx := range p.Texts {
			if tx.Class == "ytick" {
				ticks++
			}
		}
		if ticks < 3 || ticks > 5 {
			t.Errorf("%s: %d y tick labels, want 3 to 5", p.Title, ticks)
		}
	}
	var labels []string
	for _, tx := range doc.Panels[0].Texts {
		if tx.Class == "event-label" {
			labels = append(labels, tx.Text)
		}
	}
	if strings.Join(labels, ",") != "upgrade,disk full" {
		t.Errorf("event labels %q on the top panel", labels)
	}
}

// seriesIn returns a panel's polylines for one series and its plot area.
func seriesIn(t *testing.T, doc svgDoc, panel int, name string) ([]svgPolyline, svgRect) {
	t.Helper()
	var lines []svgPolyline
	for _, pl := range doc.Panels[panel].Polylines {
		if pl.Series == name {
			lines = append(lines, pl)
		}
	}
	for _, r := range doc.Panels[panel].Rects {
		if r.Class == "plot" {
			return lines, r
		}
	}
	t.Fatalf("panel %d has no plot area", panel)
	return nil, svgRect{}
}

// The highest reading sits on the top of its panel when the axis ends
// at it (100 is a round end), and zero on the bottom.
func TestSVGScale(t *testing.T) {
	s := samplesOf(1, 0, time.Hour, flat)
	s[100].RSSBytes = 100 * mib
	s[200].HeapBytes = 0
	doc := drawn(t, s, nil, "scale")
	lines, plot := seriesIn(t, doc, 0, "RSS")
	if len(lines) != 1 {
		t.Fatalf("%d RSS lines", len(lines))
	}
	if y := points(t, lines[0])[100][1]; y != plot.Y {
		t.Errorf("100 MiB drawn at y %v, want the plot's top %v", y, plot.Y)
	}
	heap, _ := seriesIn(t, doc, 0, "Go heap")
	if y := points(t, heap[0])[200][1]; y != plot.Y+plot.Height {
		t.Errorf("0 MiB drawn at y %v, want the plot's bottom %v", y, plot.Y+plot.Height)
	}
}

// A line breaks where no agent ran; readings that mean nothing (CPU per
// exec with no execs, p99 with no queries) break it too.
func TestSVGBreaks(t *testing.T) {
	s, ev := threeAgents()
	s[50].ExecRate, s[50].CPUPerExecUS = 0, 0
	doc := drawn(t, s, ev, "restarts")
	for _, c := range []struct {
		panel int
		name  string
		want  int
	}{{0, "RSS", 3}, {0, "Go heap", 3}, {1, "CPU per exec", 4}, {5, "goroutines", 3}, {7, "query p99", 0}} {
		if lines, _ := seriesIn(t, doc, c.panel, c.name); len(lines) != c.want {
			t.Errorf("%s: %d polylines, want %d", c.name, len(lines), c.want)
		}
	}
}

// Past maxSvgPoints a series is bucketed, keeping a lone latency spike.
func TestSVGDownsample(t *testing.T) {
	s := samplesOf(1, 0, 30*time.Hour, busy) // 10800 samples
	for i := range s {
		s[i].QueryP99MS = 1
	}
	s[5003].QueryP99MS = 100 // a round axis end
	doc := drawn(t, s, nil, "long")
	lines, plot := seriesIn(t, doc, 7, "query p99")
	if len(lines) != 1 {
		t.Fatalf("%d query p99 lines", len(lines))
	}
	pts := points(t, lines[0])
	top := math.Inf(1)
	for _, p := range pts {
		top = math.Min(top, p[1])
	}
	if len(pts) > maxSvgPoints || len(pts) < maxSvgPoints/2 {
		t.Errorf("%d points, want at most %d", len(pts), maxSvgPoints)
	}
	if top != plot.Y {
		t.Errorf("the spike's highest point is at y %v, want the plot's top %v", top, plot.Y)
	}
}

func TestSVGEmpty(t *testing.T) {
	doc := drawn(t, nil, nil, "")
	for _, p := range doc.Panels {
		if len(p.Polylines) != 0 {
			t.Errorf("%s: %d polylines from no samples", p.Title, len(p.Polylines))
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestSVGWriteError(t *testing.T) {
	if err := DrawSVG(failWriter{}, nil, nil, "x"); err == nil || !strings.Contains(err.Error(), "writing soak SVG: disk full") {
		t.Errorf("error %v", err)
	}
}

func TestSVGNiceAxis(t *testing.T) {
	for _, c := range []struct{ max, top, step float64 }{
		{0, 1, 0.5}, {1, 1, 0.25}, {1.01, 1.5, 0.5}, {48, 60, 20}, {100, 100, 25},
		{101, 150, 50}, {360, 400, 100}, {1440, 1500, 500}, {0.003, 0.003, 0.001},
	} {
		top, step := niceAxis(c.max)
		if !near(top, c.top, 1e-12) || !near(step, c.step, 1e-12) {
			t.Errorf("niceAxis(%v) = %v, %v, want %v, %v", c.max, top, step, c.top, c.step)
		}
		if n := int(math.Round(top/step)) + 1; n < 3 || n > 5 {
			t.Errorf("niceAxis(%v): %d labels", c.max, n)
		}
	}
}
