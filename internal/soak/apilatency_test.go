package soak

import (
	"fmt"
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// histFamily is a histogram of routes "r0", "r1", ..., each given as its
// cumulative counts under 1, 10 and 100 ms and in all.
func histFamily(routes ...[]uint64) *dto.MetricFamily {
	le := []float64{0.001, 0.01, 0.1}
	f := &dto.MetricFamily{}
	for r, counts := range routes {
		h := &dto.Histogram{SampleCount: proto.Uint64(counts[len(counts)-1])}
		for i, b := range le {
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(counts[i])})
		}
		f.Metric = append(f.Metric, &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String("route"), Value: proto.String(fmt.Sprintf("r%d", r))}},
			Histogram: h})
	}
	return f
}

// TestAPIHist: routes add up, a reading adds only what came since the same
// agent's previous one, a new agent's from zero, and the p99 interpolates
// within its bucket as histogram_quantile does.
func TestAPIHist(t *testing.T) {
	var hs apiHists
	// Two routes: 90 under 1 ms, 9 under 10 ms, 1 under 100 ms in all.
	first := readAPIHist(histFamily([]uint64{50, 55, 55, 55}, []uint64{40, 44, 45, 45}))
	hs.add(first, nil)
	h := hs.all()
	if got := h.quantile(0.99); math.Abs(got-10) > 1e-9 {
		t.Fatalf("p99 of 100 = %v ms, want 10 (the 99th is the last under 10 ms)", got)
	}
	if got, want := h.quantile(0.5), 50.0/90; math.Abs(got-want) > 1e-9 {
		t.Fatalf("p50 = %v ms, want %v (the 50th of 90 under 1 ms)", got, want)
	}
	// The same agent later: 100 more, all between 10 and 100 ms.
	later := readAPIHist(histFamily([]uint64{50, 55, 105, 105}, []uint64{40, 44, 95, 95}))
	hs.add(later, first)
	h = hs.all()
	if got := h.counts[len(h.counts)-1]; got != 200 {
		t.Fatalf("%v counted, want 200", got)
	}
	// Each route on its own: r0's median (the 53rd of 105) took 1 to
	// 10 ms, r1's (the 48th of 95, 44 under 10 ms) 10 to 100.
	if got := hs["r0"].quantile(0.5); got <= 1 || got > 10 {
		t.Fatalf("r0's p50 = %v ms, want between 1 and 10", got)
	}
	if got := hs["r1"].quantile(0.5); got <= 10 || got > 100 {
		t.Fatalf("r1's p50 = %v ms, want between 10 and 100", got)
	}
	// A new agent starts from zero: its counts are added whole.
	hs.add(readAPIHist(histFamily([]uint64{10, 10, 10, 10})), nil)
	h = hs.all()
	if got := h.counts[len(h.counts)-1]; got != 210 {
		t.Fatalf("%v counted after a restart, want 210", got)
	}
	if got := h.quantile(0.99); got <= 10 || got > 100 {
		t.Fatalf("p99 = %v ms, want between 10 and 100", got)
	}
	if got := (apiHist{}).quantile(0.99); !math.IsNaN(got) {
		t.Fatalf("empty p99 = %v, want NaN", got)
	}
}
