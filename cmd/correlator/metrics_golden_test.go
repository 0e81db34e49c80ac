package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/execid/correlator/internal/escluster"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/bridge"
	"github.com/execid/correlator/pkg/join"
)

var updateMetrics = flag.Bool("update", false, "rewrite testdata/metrics.golden from this run")

const metricsGolden = "testdata/metrics.golden"

// TestMetricsPage is node_exporter's end-to-end test for this agent: a
// real `correlator run`, one real exec in a container, one audit record,
// and the whole /metrics page compared with a fixture. The fixture holds
// every series the agent exports, and marks "moved" those the scenario
// must drive above zero, so a counter that is never incremented (or a
// series nobody creates) fails here. The dashboard is then checked
// against the page: every query names a series the agent really serves.
// go test ./cmd/correlator -run TestMetricsPage -update rewrites it.
func TestMetricsPage(t *testing.T) {
	// Every optional part is on, so every family the dashboard plots is
	// served: the Elasticsearch store and lookup (the real cluster, under a
	// prefix of the test's own), and three alert sinks.
	es := escluster.Shared(t)
	esArgs, _ := esRunFlags(t, es)
	hook := &hookReceiver{}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)
	env := newE2EEnv(t, testutil.ContainerConfig{})
	a := env.start(append([]string{"--store", "elasticsearch", "--audit-lookup", "elasticsearch",
		"--alert-sink", "file:" + filepath.Join(env.dir, "alerts.jsonl"), "--alert-sink", "webhook:" + hookSrv.URL,
		"--alert-sink", "elasticsearch:" + es.URL(), "--alert-spool-dir", filepath.Join(env.dir, "spool")}, esArgs...)...)
	m := marker()
	// The record says an interactive shell, so a rule fires and the sinks
	// deliver; the process itself is a plain exec.
	req := a.request("alice", "sh")
	req.TTY = true
	a.exec(req, "/bin/echo", m)
	a.postWebhook(req)
	a.waitFor(m, 0, func(ps []join.Process) error {
		if byArgv(ps, "/bin/echo", m) == nil {
			return fmt.Errorf("the exec is not stored yet")
		}
		return attributed(ps, req.AuditID, "audit_id")
	})
	if *updateMetrics {
		// Wait for what the scenario drives, then record the page.
		var page []series
		testutil.EventuallyNil(t, func() error {
			page = scrape(t, a.base+"/metrics", a.env.dir)
			for _, name := range []string{`correlator_store_rows_total{outcome="committed"}`, `correlator_audit_records_read_total`,
				`correlator_alert_sink_sent_total{sink="webhook`, `correlator_alert_sink_sent_total{sink="file`,
				`correlator_alert_sink_sent_total{sink="elasticsearch`} {
				if !movedPrefix(page, name) {
					return fmt.Errorf("%s has not moved yet", name)
				}
			}
			return nil
		})
		if err := os.WriteFile(metricsGolden, []byte(renderFixture(page)), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(metricsGolden)
	if err != nil {
		t.Fatalf("reading the fixture (create it with -update): %v", err)
	}
	want := parseGolden(string(b))
	// Counters move as the pipeline gets to them (the joiner's on its
	// tick, each sink on its own schedule): wait until the page matches.
	var page []series
	testutil.EventuallyNil(t, func() error {
		page = scrape(t, a.base+"/metrics", a.env.dir)
		return diffGolden(want, page)
	})
	checkDashboard(t, page)
}

// series is one sample line of the page, its value reduced to whether it
// moved: values depend on the host (every exec on it is captured).
type series struct {
	key   string // name{labels}
	typ   string
	moved bool
}

func scrape(t *testing.T, url, dir string) []series {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %v", resp.Status, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	var out []series
	for name, f := range fams {
		if !strings.HasPrefix(name, "correlator_") {
			continue // the Go and process collectors vary with the toolchain
		}
		typ := strings.ToLower(f.GetType().String())
		for _, mt := range f.GetMetric() {
			out = append(out, series{key: name + labels(mt, dir), typ: typ, moved: value(mt) > 0})
		}
	}
	for _, std := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[std] == nil {
			t.Errorf("/metrics lacks %s (the standard collectors)", std)
		}
	}
	slices.SortFunc(out, func(a, b series) int { return strings.Compare(a.key, b.key) })
	return out
}

// loopbackPort is a test server's random port in a label (a sink's name).
var loopbackPort = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// labels renders a sample's labels, with the test's temporary paths and
// ports replaced so the fixture holds on every machine.
func labels(mt *dto.Metric, dir string) string {
	var parts []string
	for _, l := range mt.GetLabel() {
		v := strings.ReplaceAll(l.GetValue(), dir, "$DIR")
		v = loopbackPort.ReplaceAllString(v, "127.0.0.1:$$PORT")
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), v))
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func value(mt *dto.Metric) float64 {
	switch {
	case mt.Counter != nil:
		return mt.Counter.GetValue()
	case mt.Gauge != nil:
		return mt.Gauge.GetValue()
	case mt.Histogram != nil:
		return float64(mt.Histogram.GetSampleCount())
	case mt.Summary != nil:
		return float64(mt.Summary.GetSampleCount())
	}
	return mt.GetUntyped().GetValue()
}

func movedPrefix(page []series, prefix string) bool {
	for _, s := range page {
		if strings.HasPrefix(s.key, prefix) && s.moved {
			return true
		}
	}
	return false
}

// renderFixture writes the fixture: "TYPE key moved|any". A series that moved in
// this run is recorded as one that must move; the others (loss counters,
// mostly zero) must exist, whatever their value on a busy machine.
func renderFixture(page []series) string {
	var b strings.Builder
	b.WriteString("# /metrics after one exec and one audit record (TestMetricsPage; -update rewrites).\n")
	b.WriteString("# moved: the scenario must drive it above zero; any: it must be exported.\n")
	for _, s := range page {
		v := "any"
		if s.moved && !racy(s.key) {
			v = "moved"
		}
		fmt.Fprintf(&b, "%s %s %s\n", s.typ, s.key, v)
	}
	return b.String()
}

// racy is a series whose movement in this scenario depends on timing: the
// store and the Elasticsearch alert sink both index each alert under its
// ID (the second is a duplicate), and whether the session is updated again
// after its alert fired decides a suppression.
//
// The agent also sees the host's own processes and whatever else runs on
// the machine, so what the meta cache and the stored-records lookup do
// beyond the one exec depends on the machine: a busy one moved these in an
// -update run once, and a quiet one left them at zero.
func racy(key string) bool {
	return strings.HasPrefix(key, "correlator_es_alert_sink_bulk_items_total") ||
		key == "correlator_alert_suppressed_total" ||
		strings.HasPrefix(key, "correlator_es_store_bulk_items_total{result=\"duplicate\"}") ||
		key == "correlator_meta_cache_hits_total" || key == `correlator_meta_resolved_total{source="cgroup"}` ||
		key == `correlator_agent_audit_lookups_total{outcome="none"}` || key == `correlator_es_audit_lookups_total{result="not_found"}`
}

func parseGolden(text string) map[string][2]string {
	out := map[string][2]string{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		out[f[1]] = [2]string{f[0], f[len(f)-1]}
	}
	return out
}

// diffGolden lists every way the page differs from the fixture.
func diffGolden(want map[string][2]string, page []series) error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range page {
		seen[s.key] = true
		w, ok := want[s.key]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("/metrics serves %s (%s), which the fixture lacks: put it on the dashboard, then run -update", s.key, s.typ))
		case w[0] != s.typ:
			errs = append(errs, fmt.Errorf("%s: type %s, fixture says %s", s.key, s.typ, w[0]))
		case w[1] == "moved" && !s.moved:
			errs = append(errs, fmt.Errorf("%s did not move: the scenario drives it, so something stopped counting", s.key))
		}
	}
	for key := range want {
		if !seen[key] {
			errs = append(errs, fmt.Errorf("/metrics no longer serves %s", key))
		}
	}
	return errors.Join(errs...)
}

// checkDashboard: every metric a Grafana query names is on the page.
func checkDashboard(t *testing.T, page []series) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana", "correlator.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, s := range page {
		name, _, _ := strings.Cut(s.key, "{")
		served[name] = true
		if s.typ == "histogram" || s.typ == "summary" {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				served[name+suf] = true
			}
		}
	}
	// `correlator bridge` serves its own metrics: take their names from
	// what it registers (described, so series not yet made count too).
	rec := &describedNames{Registerer: prometheus.NewRegistry(), names: served}
	if _, err := bridge.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	metric := regexp.MustCompile(`\bcorrelator_[a-z0-9_]+\b`)
	exprs := 0
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				exprs++
				for _, m := range metric.FindAllString(e, -1) {
					if !served[m] {
						t.Errorf("dashboard query %q names %s, which /metrics does not serve", e, m)
					}
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(dash)
	if exprs == 0 {
		t.Fatal("the dashboard has no queries: the walk is broken")
	}
}

// describedNames registers collectors and marks every metric name they
// describe in names, with a histogram's series suffixes.
type describedNames struct {
	prometheus.Registerer
	names map[string]bool
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describedNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for desc := range ch {
			if m := descName.FindStringSubmatch(desc.String()); m != nil {
				for _, suf := range []string{"", "_bucket", "_sum", "_count"} {
					d.names[m[1]+suf] = true
				}
			}
		}
	}
	d.Registerer.MustRegister(cs...)
}
