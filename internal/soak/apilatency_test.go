package soak

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func histFamily(routes ...[]uint64) *dto.MetricFamily {
	le := []float64{0.001, 0.01, 0.1}
	f := &dto.MetricFamily{}
	for _, counts := range routes {
		h := &dto.Histogram{SampleCount: proto.Uint64(counts[len(counts)-1])}
		for i, b := range le {
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(counts[i])})
		}
		f.Metric = append(f.Metric, &dto.Metric{Histogram: h})
	}
	return f
}

// TestAPIHist: routes add up, a reading adds only what came since the same
// agent's previous one, a new agent's from zero, and the p99 interpolates
// within its bucket as histogram_quantile does.
func TestAPIHist(t *testing.T) {
	var h apiHist
	// Two routes: 90 under 1 ms, 9 under 10 ms, 1 under 100 ms in all.
	first := readAPIHist(histFamily([]uint64{50, 55, 55, 55}, []uint64{40, 44, 45, 45}))
	h.add(first, apiHist{})
	if got := h.quantile(0.99); math.Abs(got-10) > 1e-9 {
		t.Fatalf("p99 of 100 = %v ms, want 10 (the 99th is the last under 10 ms)", got)
	}
	if got, want := h.quantile(0.5), 50.0/90; math.Abs(got-want) > 1e-9 {
		t.Fatalf("p50 = %v ms, want %v (the 50th of 90 under 1 ms)", got, want)
	}
	// The same agent later: 100 more, all between 10 and 100 ms.
	later := readAPIHist(histFamily([]uint64{50, 55, 105, 105}, []uint64{40, 44, 95, 95}))
	h.add(later, first)
	if got := h.counts[len(h.counts)-1]; got != 200 {
		t.Fatalf("%v counted, want 200", got)
	}
	// A new agent starts from zero: its counts are added whole.
	h.add(readAPIHist(histFamily([]uint64{10, 10, 10, 10})), apiHist{})
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
