package soak

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// reading is what one look at the agent process and its /metrics gives.
type reading struct {
	rss, anon, cpuTicks  int64
	fds                  int
	heap, heapKept       float64
	nextGC               float64
	goroutines           float64
	execs                float64 // correlator_agent_events_total{kind="exec"}
	ringDrops, evictions float64
	storeDropped         float64
	storeWritable        float64
	api                  apiHists // correlator_api_request_seconds by route
}

// clockTicks is USER_HZ, 100 on every Linux the agent runs on.
const clockTicks = 100

// readProc reads the agent's RSS, CPU and open files from /proc.
func readProc(pid int) (reading, error) {
	var r reading
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, fmt.Errorf("reading the agent's status: %w", err)
	}
	if r.rss, err = parseStatusKB(status, "VmRSS:"); err != nil {
		return r, err
	}
	if r.anon, err = parseStatusKB(status, "RssAnon:"); err != nil {
		return r, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return r, fmt.Errorf("reading the agent's stat: %w", err)
	}
	if r.cpuTicks, err = parseStatCPU(stat); err != nil {
		return r, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return r, fmt.Errorf("reading the agent's fds: %w", err)
	}
	r.fds = len(fds)
	return r, nil
}

// parseStatusKB returns a kB field of /proc/PID/status, in bytes.
func parseStatusKB(b []byte, field string) (int64, error) {
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte(field)); ok {
			f := strings.Fields(string(rest))
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("parsing %s %q", field, strings.TrimSpace(string(rest)))
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing %s: %w", field, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("parsing status: no %s line", field)
}

// parseStatCPU returns utime+stime from /proc/PID/stat, in clock ticks.
// The command name may hold spaces and parentheses: fields count from the
// last ')'.
func parseStatCPU(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state is field 3; utime 14 and stime 15 (1-based).
	if len(f) < 13 {
		return 0, fmt.Errorf("parsing stat: %d fields after the name", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parsing stat's utime %q and stime %q", f[11], f[12])
	}
	return u + s, nil
}

// scrape reads the agent's /metrics into r.
func scrape(ctx context.Context, base string, r *reading) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return fmt.Errorf("building the metrics request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scraping metrics: %w", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("parsing metrics: %w", err)
	}
	r.heap = sum(fams, "go_memstats_heap_inuse_bytes", nil)
	r.heapKept = r.heap + sum(fams, "go_memstats_heap_idle_bytes", nil) - sum(fams, "go_memstats_heap_released_bytes", nil)
	r.nextGC = sum(fams, "go_memstats_next_gc_bytes", nil)
	r.goroutines = sum(fams, "go_goroutines", nil)
	r.execs = sum(fams, "correlator_agent_events_total", map[string]string{"kind": "exec"})
	r.ringDrops = sum(fams, "correlator_capture_ringbuf_drops_total", nil)
	r.evictions = sum(fams, "correlator_join_evicted_total", nil)
	r.storeDropped = sum(fams, "correlator_store_rows_total", map[string]string{"outcome": "dropped"})
	r.storeWritable = sum(fams, "correlator_store_writable", nil)
	r.api = readAPIHist(fams["correlator_api_request_seconds"])
	return nil
}

// sum adds the values of name's series whose labels include want.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var total float64
	for _, m := range f.GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match != len(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// fileSize is a file's size, 0 when it is absent.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
