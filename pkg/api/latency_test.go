package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime/trace"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store/sqlite"
)

// TestLatencyByRoute: each query is timed once under its route, refused
// ones included; health and the OpenAPI document are not (the control:
// their requests leave the counts as they were).
func TestLatencyByRoute(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewPedanticRegistry()
	lat, err := NewLatency(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewLatency(reg); err == nil {
		t.Fatal("a second registration was not refused")
	}
	srv := httptest.NewServer(NewHandler(st, Config{Latency: lat}, zerolog.Nop()))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/api/v1/sessions", "/api/v1/sessions?user=alice", "/api/v1/sessions/nope",
		"/api/v1/processes?command=cat", "/api/v1/processes?attribution=bogus", "/api/v1/alerts", "/healthz",
		"/api/v1/openapi.json"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= http.StatusInternalServerError {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	for route, want := range map[string]uint64{"sessions": 2, "session": 1, "processes": 2, "alerts": 1} {
		h, err := lat.h.GetMetricWithLabelValues(route)
		if err != nil {
			t.Fatal(err)
		}
		var m dto.Metric
		if err := h.(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("route %s: %d timed, want %d", route, got, want)
		}
	}
	if n := testutil.CollectAndCount(lat.h); n != 4 {
		t.Errorf("%d routes timed, want 4", n)
	}
}

// TestLatencyTraceTask: under an execution trace a query is a task named
// by its route; the control, a health check, names none.
func TestLatencyTraceTask(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	lat, err := NewLatency(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(st, Config{Latency: lat}, zerolog.Nop()))
	t.Cleanup(srv.Close)
	traced := func(path string) []byte {
		var buf bytes.Buffer
		if err := trace.Start(&buf); err != nil {
			t.Fatalf("starting an execution trace (is one running already, go test -trace?): %v", err)
		}
		resp, err := srv.Client().Get(srv.URL + path)
		trace.Stop()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return buf.Bytes()
	}
	if b := traced("/healthz"); bytes.Contains(b, []byte("api ")) {
		t.Fatal("a health check named a task: the check below would pass without one")
	}
	if b := traced("/api/v1/sessions?user=alice"); !bytes.Contains(b, []byte("api sessions")) {
		t.Error("a query under a trace named no task \"api sessions\"")
	}
}
