package soak

import (
	"fmt"
	"math"
	"strings"
)

// Targets are the most each figure may be for the soak to pass.
type Targets struct {
	MaxMemorySlopeMiBPerHour float64 // RssAnon and Go heap each
	MaxAnonMiB               float64 // the agent's own memory; VmRSS adds the binary's and the ring's pages
	MaxCPUPerExecChangePct   float64
	MaxQueryP99MS            float64
	MaxLost                  int64
	MaxRingDrops             int64
	MaxStoreMiB              float64 // 0: no target; set from the retention
	// MaxStoreSlopeMiBPerHour is the store's growth over the run's second
	// half, when retention has long been deleting: bounded means flat.
	MaxStoreSlopeMiBPerHour float64 // 0: no target
	MaxWALMiB               float64 // 0: no target
}

// DefaultTargets are the agent's published budgets; the store and WAL
// targets depend on the retention, so the caller sets them.
func DefaultTargets() Targets {
	return Targets{
		MaxMemorySlopeMiBPerHour: 2,
		MaxAnonMiB:               100,
		MaxCPUPerExecChangePct:   10,
		MaxQueryP99MS:            10,
		MaxLost:                  0,
		MaxRingDrops:             0,
	}
}

// judgment is one figure held against its target.
type judgment struct {
	name   string
	value  float64
	target float64
	unit   string
	set    bool // false: no target given
	judged bool // false: the run is too short for this figure to mean anything
}

// judgments lists every target once, so Check and Report agree. The
// slopes and the CPU change need hours to rise above the noise, and a
// short run's query latency is CI's shared cores' as much as the agent's:
// a short run reports them and does not judge them.
func (t Targets) judgments(f Figures, long bool) []judgment {
	return []judgment{
		{"memory slope", f.MemorySlopeMiBPerHour, t.MaxMemorySlopeMiBPerHour, "MiB/h", true, long},
		{"heap slope", f.HeapSlopeMiBPerHour, t.MaxMemorySlopeMiBPerHour, "MiB/h", true, long},
		{"CPU per exec change", f.CPUPerExecChangePct, t.MaxCPUPerExecChangePct, "%", true, long},
		{"max RssAnon", f.MaxAnonMiB, t.MaxAnonMiB, "MiB", true, true},
		{"query p99", f.QueryP99MS, t.MaxQueryP99MS, "ms", true, long},
		{"requests lost", float64(f.Lost), float64(t.MaxLost), "", true, true},
		{"ring buffer drops", float64(f.RingDrops), float64(t.MaxRingDrops), "", true, true},
		{"max store", f.MaxStoreMiB, t.MaxStoreMiB, "MiB", t.MaxStoreMiB > 0, true},
		{"store slope", f.StoreSlopeMiBPerHour, t.MaxStoreSlopeMiBPerHour, "MiB/h", t.MaxStoreSlopeMiBPerHour > 0, long},
		{"max WAL", f.MaxWALMiB, t.MaxWALMiB, "MiB", t.MaxWALMiB > 0, true},
	}
}

// Check returns one line per target the figures miss, none when all are
// met. A figure that could not be measured misses its target. When long
// is false (a run of minutes), the slopes and the CPU change are not
// judged.
func (t Targets) Check(f Figures, long bool) []string {
	var out []string
	for _, j := range t.judgments(f, long) {
		switch {
		case !j.set || !j.judged:
		case math.IsNaN(j.value):
			out = append(out, fmt.Sprintf("%s not measured (too few samples), target %s", j.name, withUnit(j.target, j.unit)))
		case j.value > j.target:
			out = append(out, fmt.Sprintf("%s %s over the %s target", j.name, withUnit(j.value, j.unit), withUnit(j.target, j.unit)))
		}
	}
	return out
}

// Report is a plain text block, one target a line: the figure, its
// target, and "ok", "OVER", "not measured", "not judged (short run)" or
// "no target".
func (t Targets) Report(f Figures, long bool) string {
	var b strings.Builder
	for _, j := range t.judgments(f, long) {
		target, verdict := "≤ "+withUnit(j.target, j.unit), "ok"
		switch {
		case !j.set:
			target, verdict = "", "no target"
		case !j.judged:
			verdict = "not judged (short run)"
		case math.IsNaN(j.value):
			verdict = "not measured"
		case j.value > j.target:
			verdict = "OVER"
		}
		value := withUnit(j.value, j.unit)
		if math.IsNaN(j.value) {
			value = "n/a"
		}
		fmt.Fprintf(&b, "%-20s %-14s %-14s %s\n", j.name, value, target, verdict)
	}
	return b.String()
}
