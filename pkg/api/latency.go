package api

import (
	"fmt"
	"net/http"
	"runtime/trace"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Latency times the responders' queries in the agent, from the handler's
// start to its return: what a client sees less the network and the wait
// for the process to be scheduled.
type Latency struct{ h *prometheus.HistogramVec }

// NewLatency registers the histogram with reg.
func NewLatency(reg prometheus.Registerer) (*Latency, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "correlator_api_request_seconds",
		Help: "Time the REST API took to answer a query, by route (sessions, session, processes, alerts), " +
			"authentication included.",
		// Fine around the 10 ms goal: a p99 read between 20 and 50 ms
		// was the buckets' interpolation as much as the agent's time.
		Buckets: []float64{.001, .002, .005, .0075, .01, .015, .02, .03, .04, .05, .1, .25, .5, 1, 2.5, 10}}, []string{"route"})
	if err := reg.Register(h); err != nil {
		return nil, fmt.Errorf("registering the API's latency: %w", err)
	}
	return &Latency{h: h}, nil
}

// timed wraps h to observe its time under route; a nil l does not time.
func (l *Latency) timed(route string, h http.Handler) http.Handler {
	if l == nil {
		return h
	}
	o := l.h.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// Under an execution trace (--pprof-listen's /debug/pprof/trace)
		// each query is a task named by its route, so that a slow one's
		// time can be split into running, waiting to run and blocked.
		if trace.IsEnabled() {
			ctx, task := trace.NewTask(r.Context(), "api "+route)
			defer task.End()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
		o.Observe(time.Since(start).Seconds())
	})
}
