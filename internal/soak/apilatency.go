package soak

import (
	"cmp"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
)

// apiHist is the agent's correlator_api_request_seconds, as cumulative
// bucket counts by upper bound: what the agent itself took to answer,
// apart from the client's process and the network.
type apiHist struct {
	le     []float64 // upper bounds, +Inf last
	counts []float64 // cumulative, as the agent exports them
}

// apiHists are the histogram's routes ("sessions", "session",
// "processes", ...): the session route also times the verifier's many
// lookups, so a figure over every route is not one of the client's kinds.
type apiHists map[string]apiHist

// readAPIHist reads the histogram by route.
func readAPIHist(f *dto.MetricFamily) apiHists {
	hs := apiHists{}
	for _, m := range f.GetMetric() {
		hist := m.GetHistogram()
		if hist == nil {
			continue
		}
		route := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" {
				route = l.GetValue()
			}
		}
		h := hs[route]
		inf := false
		for _, b := range hist.GetBucket() {
			h.addTo(b.GetUpperBound(), float64(b.GetCumulativeCount()))
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !inf { // the text format's +Inf bucket is the sample count
			h.addTo(math.Inf(1), float64(hist.GetSampleCount()))
		}
		hs[route] = h
	}
	return hs
}

// add adds each route's counts of cur since prev (apiHist.add).
func (hs *apiHists) add(cur, prev apiHists) {
	if *hs == nil {
		*hs = apiHists{}
	}
	for route, h := range cur {
		sum := (*hs)[route]
		sum.add(h, prev[route])
		(*hs)[route] = sum
	}
}

// all is every route's counts added up.
func (hs apiHists) all() apiHist {
	var h apiHist
	for _, r := range hs {
		h.add(r, apiHist{})
	}
	return h
}

// addTo adds n to the bucket of upper bound le, made if new.
func (h *apiHist) addTo(le, n float64) {
	i := slices.Index(h.le, le)
	if i < 0 {
		h.le = append(h.le, le)
		h.counts = append(h.counts, 0)
		i = len(h.le) - 1
	}
	h.counts[i] += n
}

// add adds the counts of cur since prev (the same agent's previous
// reading; a zero prev for a new agent, whose counts start at zero).
func (h *apiHist) add(cur, prev apiHist) {
	for i, le := range cur.le {
		d := cur.counts[i]
		if j := slices.Index(prev.le, le); j >= 0 && prev.counts[j] <= d {
			d -= prev.counts[j]
		}
		h.addTo(le, d)
	}
}

// quantile is q of the histogram in milliseconds, interpolated within its
// bucket as Prometheus's histogram_quantile does; NaN with no count.
func (h apiHist) quantile(q float64) float64 {
	idx := make([]int, len(h.le))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(h.le[a], h.le[b]) })
	if len(idx) == 0 || h.counts[idx[len(idx)-1]] == 0 {
		return math.NaN()
	}
	total := h.counts[idx[len(idx)-1]]
	rank := q * total
	lower, below := 0.0, 0.0
	for _, i := range idx {
		if h.counts[i] >= rank {
			if math.IsInf(h.le[i], 1) {
				return lower * 1000 // past the last finite bound: that bound
			}
			in := h.counts[i] - below
			if in <= 0 {
				return h.le[i] * 1000
			}
			return (lower + (h.le[i]-lower)*(rank-below)/in) * 1000
		}
		lower, below = h.le[i], h.counts[i]
	}
	return lower * 1000
}
