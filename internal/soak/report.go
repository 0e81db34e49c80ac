package soak

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

const (
	mib = 1 << 20

	// minSegmentSamples is the fewest readings a least-squares slope is
	// taken over; fewer and one noisy reading sets the result.
	minSegmentSamples = 10
	// minEdgeSamples is the fewest readings a start or end median is
	// taken over, when a tenth of the segment is fewer.
	minEdgeSamples = 5
)

// Figures are a soak's results, computed by Summarize. A float figure
// that could not be measured (too few readings) is NaN.
type Figures struct {
	Duration    time.Duration // the last sample's Elapsed
	WarmUp      time.Duration
	Samples     int // readings after the warm-up while an agent ran
	Generations int // agent processes seen

	// The slopes and the start and end figures come from one agent
	// process: the longest-lived, after its own warm-up (see Summarize).
	SlopeAgent   int // 0 when no process qualified
	SlopeFrom    time.Duration
	SlopeTo      time.Duration
	SlopeSamples int

	MemorySlopeMiBPerHour float64 // anonymous memory (RssAnon)
	HeapSlopeMiBPerHour   float64
	// RestSlopeMiBPerHour is RssAnon's less the Go heap's kept pages
	// (Sample.HeapKeptBytes): SQLite's memory, the stacks, the runtime's
	// own. With MaxKeptOverGoal it tells a leak from the runtime keeping
	// what a burst touched, up to about its goal and a quarter.
	RestSlopeMiBPerHour float64
	MaxKeptOverGoal     float64 // the segment's largest HeapKeptBytes / NextGCBytes
	MaxRSSMiB           float64 // VmRSS, with the binary's pages and the ring buffer's
	MaxAnonMiB          float64
	MaxHeapMiB          float64

	// Medians over the first and the last tenth (at least
	// minEdgeSamples) of the segment's readings with execs.
	CPUPerExecStartUS   float64
	CPUPerExecEndUS     float64
	CPUPerExecChangePct float64 // (end-start)/start*100
	ExecRateMedian      float64 // over readings with execs
	ExecRateMax         float64

	MaxStoreMiB          float64
	MaxWALMiB            float64
	StoreMiBAtEnd        float64
	StoreSlopeMiBPerHour float64 // over the second half of the run

	// Start and end are medians over the segment's first and last
	// tenth, as for CPU per exec.
	MaxOpenFiles    int
	OpenFilesStart  float64
	OpenFilesEnd    float64
	MaxGoroutines   int
	GoroutinesStart float64
	GoroutinesEnd   float64

	// The node's CPU time, every CPU's, over the readings after the
	// warm-up (Sample.NodeBusy, NodeSteal), in percent: what tells a
	// busier node from a slower agent between two runs.
	NodeBusyMedianPct  float64
	NodeBusyP90Pct     float64
	NodeStealMedianPct float64
	NodeStealMaxPct    float64

	QueryP99MS       float64 // the caller's, over every query of the run
	MaxIntervalP99MS float64 // over the intervals that had queries
	Queries          int
	QueryFails       int

	// The last values of the cumulative counters.
	RingDrops    int64
	Evictions    int64
	StoreDropped int64
	Acked        int64
	Verified     int64
	Lost         int64

	Events []Event // in time order
}

// Summarize computes the figures of a soak. warmUp is skipped at the
// start of the run and again at the start of every agent process, since
// a new process warms up too. Memory, CPU, files and goroutines count
// only readings with an agent running (Agent > 0); the cumulative
// counters and the query figures count the whole run. The maxima count
// a restarted process's warm-up too: a memory limit applies then as
// well.
//
// A restart resets RSS, heap and goroutines, so a slope across restarts
// measures the restarts, not a leak. The slopes therefore come from one
// process: of the processes with at least minSegmentSamples readings
// after their own warm-up, spanning at least a tenth of the run after
// the warm-up, the one with the longest span. The store outlives
// processes, so its slope is over every reading of the second half.
func Summarize(samples []Sample, events []Event, warmUp time.Duration, queryP99 float64) Figures {
	s := sortedSamples(samples)
	nan := math.NaN()
	f := Figures{
		WarmUp:                warmUp,
		QueryP99MS:            queryP99,
		MemorySlopeMiBPerHour: nan, HeapSlopeMiBPerHour: nan, RestSlopeMiBPerHour: nan, MaxKeptOverGoal: nan,
		MaxRSSMiB: nan, MaxAnonMiB: nan, MaxHeapMiB: nan,
		CPUPerExecStartUS: nan, CPUPerExecEndUS: nan, CPUPerExecChangePct: nan,
		ExecRateMedian: nan, ExecRateMax: nan,
		MaxStoreMiB: nan, MaxWALMiB: nan, StoreMiBAtEnd: nan, StoreSlopeMiBPerHour: nan,
		OpenFilesStart: nan, OpenFilesEnd: nan, GoroutinesStart: nan, GoroutinesEnd: nan,
		MaxIntervalP99MS:  nan,
		NodeBusyMedianPct: nan, NodeBusyP90Pct: nan, NodeStealMedianPct: nan, NodeStealMaxPct: nan,
	}
	f.Events = append([]Event(nil), events...)
	sort.SliceStable(f.Events, func(i, j int) bool { return f.Events[i].Elapsed < f.Events[j].Elapsed })
	if len(s) == 0 {
		return f
	}
	f.Duration = s[len(s)-1].Elapsed

	// Cumulative counters only grow; the maximum is the last real
	// reading even where a sample without an agent reads zero.
	for _, x := range s {
		f.Queries += x.Queries
		if x.Queries > 0 {
			f.MaxIntervalP99MS = maxNaN(f.MaxIntervalP99MS, x.QueryP99MS)
		}
		f.QueryFails = max(f.QueryFails, x.QueryFails)
		f.RingDrops = max(f.RingDrops, x.RingDrops)
		f.Evictions = max(f.Evictions, x.Evictions)
		f.StoreDropped = max(f.StoreDropped, x.StoreDropped)
		f.Acked = max(f.Acked, x.Acked)
		f.Verified = max(f.Verified, x.Verified)
		f.Lost = max(f.Lost, x.Lost)
	}

	gens := generations(s)
	f.Generations = len(gens)
	var post []Sample
	for _, x := range s {
		if x.Agent > 0 && x.Elapsed >= warmUp {
			post = append(post, x)
		}
	}
	f.Samples = len(post)
	if len(post) == 0 {
		return f
	}
	var rates, busyNode, steal []float64
	for _, x := range post {
		if x.nodeRead() {
			busyNode, steal = append(busyNode, x.NodeBusy*100), append(steal, x.NodeSteal*100)
			f.NodeStealMaxPct = maxNaN(f.NodeStealMaxPct, x.NodeSteal*100)
		}
		f.MaxRSSMiB = maxNaN(f.MaxRSSMiB, float64(x.RSSBytes)/mib)
		f.MaxAnonMiB = maxNaN(f.MaxAnonMiB, float64(x.AnonBytes)/mib)
		f.MaxHeapMiB = maxNaN(f.MaxHeapMiB, float64(x.HeapBytes)/mib)
		f.MaxStoreMiB = maxNaN(f.MaxStoreMiB, float64(x.StoreBytes)/mib)
		f.MaxWALMiB = maxNaN(f.MaxWALMiB, float64(x.WALBytes)/mib)
		f.MaxOpenFiles = max(f.MaxOpenFiles, x.OpenFiles)
		f.MaxGoroutines = max(f.MaxGoroutines, x.Goroutines)
		if x.ExecRate > 0 {
			rates = append(rates, x.ExecRate)
			f.ExecRateMax = maxNaN(f.ExecRateMax, x.ExecRate)
		}
	}
	f.ExecRateMedian = median(rates)
	f.NodeBusyMedianPct, f.NodeStealMedianPct = median(busyNode), median(steal)
	f.NodeBusyP90Pct = quantileOf(busyNode, 0.9)
	f.StoreMiBAtEnd = float64(post[len(post)-1].StoreBytes) / mib
	mid := post[0].Elapsed + (post[len(post)-1].Elapsed-post[0].Elapsed)/2
	var half []Sample
	for _, x := range post {
		if x.Elapsed >= mid {
			half = append(half, x)
		}
	}
	if len(half) >= minSegmentSamples {
		f.StoreSlopeMiBPerHour = slopePerHour(half, func(x Sample) float64 { return float64(x.StoreBytes) / mib })
	}

	seg := longestSegment(gens, warmUp, post[len(post)-1].Elapsed-post[0].Elapsed)
	if seg == nil {
		return f
	}
	f.SlopeAgent, f.SlopeSamples = seg[0].Agent, len(seg)
	f.SlopeFrom, f.SlopeTo = seg[0].Elapsed, seg[len(seg)-1].Elapsed
	f.MemorySlopeMiBPerHour = slopePerHour(seg, func(x Sample) float64 { return float64(x.AnonBytes) / mib })
	f.HeapSlopeMiBPerHour = slopePerHour(seg, func(x Sample) float64 { return float64(x.HeapBytes) / mib })
	f.RestSlopeMiBPerHour, f.MaxKeptOverGoal = restOfMemory(seg)
	f.OpenFilesStart, f.OpenFilesEnd = edgeMedians(seg, func(x Sample) float64 { return float64(x.OpenFiles) })
	f.GoroutinesStart, f.GoroutinesEnd = edgeMedians(seg, func(x Sample) float64 { return float64(x.Goroutines) })
	var busy []Sample
	for _, x := range seg {
		if x.ExecRate > 0 {
			busy = append(busy, x)
		}
	}
	f.CPUPerExecStartUS, f.CPUPerExecEndUS = edgeMedians(busy, func(x Sample) float64 { return x.CPUPerExecUS })
	if f.CPUPerExecStartUS > 0 {
		f.CPUPerExecChangePct = (f.CPUPerExecEndUS - f.CPUPerExecStartUS) / f.CPUPerExecStartUS * 100
	}
	return f
}

// restOfMemory is seg's slope of RssAnon less the Go heap's kept pages and
// the largest ratio of those pages to the heap's goal, over the readings
// that have both (NaN, NaN with too few: a run from before they were
// sampled).
func restOfMemory(seg []Sample) (slope, keptOverGoal float64) {
	var with []Sample
	keptOverGoal = math.NaN()
	for _, x := range seg {
		if x.HeapKeptBytes > 0 && x.NextGCBytes > 0 {
			with = append(with, x)
			keptOverGoal = maxNaN(keptOverGoal, float64(x.HeapKeptBytes)/float64(x.NextGCBytes))
		}
	}
	if len(with) < minSegmentSamples {
		return math.NaN(), math.NaN()
	}
	return slopePerHour(with, func(x Sample) float64 { return float64(x.AnonBytes-x.HeapKeptBytes) / mib }), keptOverGoal
}

// sortedSamples returns a copy in Elapsed order.
func sortedSamples(samples []Sample) []Sample {
	s := append([]Sample(nil), samples...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Elapsed < s[j].Elapsed })
	return s
}

// generations groups the readings by agent process, in the order the
// processes started, leaving out the readings with none. Grouping by ID
// rather than by unbroken run keeps one process whole across a reading
// that missed it.
func generations(s []Sample) [][]Sample {
	var gens [][]Sample
	index := map[int]int{}
	for _, x := range s {
		if x.Agent <= 0 {
			continue
		}
		i, ok := index[x.Agent]
		if !ok {
			i = len(gens)
			index[x.Agent] = i
			gens = append(gens, nil)
		}
		gens[i] = append(gens[i], x)
	}
	return gens
}

// longestSegment returns the longest-lived process's readings after its
// own warm-up (and the run's), or nil when none has minSegmentSamples of
// them spanning at least a tenth of postSpan.
func longestSegment(gens [][]Sample, warmUp, postSpan time.Duration) []Sample {
	var best []Sample
	var bestSpan time.Duration
	for _, g := range gens {
		from := max(warmUp, g[0].Elapsed+warmUp)
		i := sort.Search(len(g), func(i int) bool { return g[i].Elapsed >= from })
		seg := g[i:]
		if len(seg) < minSegmentSamples {
			continue
		}
		span := seg[len(seg)-1].Elapsed - seg[0].Elapsed
		if span < postSpan/10 || best != nil && span <= bestSpan {
			continue
		}
		best, bestSpan = seg, span
	}
	return best
}

// slopePerHour is the least-squares slope of v over Elapsed, per hour.
func slopePerHour(s []Sample, v func(Sample) float64) float64 {
	if len(s) < 2 {
		return math.NaN()
	}
	// Hours from the first reading keep the sums well conditioned.
	var mx, my float64
	for _, x := range s {
		mx += (x.Elapsed - s[0].Elapsed).Hours()
		my += v(x)
	}
	n := float64(len(s))
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for _, x := range s {
		dx := (x.Elapsed - s[0].Elapsed).Hours() - mx
		sxy += dx * (v(x) - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return math.NaN()
	}
	return sxy / sxx
}

// edgeMedians are the medians of v over the first and the last tenth of
// s, at least minEdgeSamples each; NaN when s cannot give two such.
func edgeMedians(s []Sample, v func(Sample) float64) (start, end float64) {
	n := max(minEdgeSamples, len(s)/10)
	if len(s) < 2*n {
		return math.NaN(), math.NaN()
	}
	vals := func(part []Sample) []float64 {
		out := make([]float64, len(part))
		for i, x := range part {
			out[i] = v(x)
		}
		return out
	}
	return median(vals(s[:n])), median(vals(s[len(s)-n:]))
}

// median of v, NaN when empty; v is reordered.
// quantileOf is v's q-th quantile, the nearest rank at or above it as
// quantileMS's; NaN for none. It sorts v.
func quantileOf(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	return v[min(len(v)-1, int(float64(len(v))*q))]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// maxNaN treats a NaN m as "no value yet".
func maxNaN(m, v float64) float64 {
	if math.IsNaN(m) || v > m {
		return v
	}
	return m
}

// String is a plain text block, one figure a line, to print and paste.
func (f Figures) String() string {
	var b strings.Builder
	line := func(name, value string) { fmt.Fprintf(&b, "%-26s %s\n", name, value) }
	seg := "none qualified"
	if f.SlopeAgent > 0 {
		seg = fmt.Sprintf("agent %d, %s to %s, %d samples", f.SlopeAgent, f.SlopeFrom, f.SlopeTo, f.SlopeSamples)
	}
	line("duration", f.Duration.String())
	line("warm-up", f.WarmUp.String())
	line("samples after warm-up", fmt.Sprint(f.Samples))
	line("agent processes", fmt.Sprint(f.Generations))
	line("slopes measured on", seg)
	line("memory (RssAnon) slope", withUnit(f.MemorySlopeMiBPerHour, "MiB/h"))
	line("heap slope", withUnit(f.HeapSlopeMiBPerHour, "MiB/h"))
	line("slope outside the heap", withUnit(f.RestSlopeMiBPerHour, "MiB/h"))
	line("heap kept / goal, most", withUnit(f.MaxKeptOverGoal, ""))
	line("max RssAnon", withUnit(f.MaxAnonMiB, "MiB"))
	line("max RSS (VmRSS)", withUnit(f.MaxRSSMiB, "MiB"))
	line("max heap", withUnit(f.MaxHeapMiB, "MiB"))
	line("CPU per exec at start", withUnit(f.CPUPerExecStartUS, "µs"))
	line("CPU per exec at end", withUnit(f.CPUPerExecEndUS, "µs"))
	line("CPU per exec change", withUnit(f.CPUPerExecChangePct, "%"))
	line("exec rate, median", withUnit(f.ExecRateMedian, "/s"))
	line("exec rate, max", withUnit(f.ExecRateMax, "/s"))
	line("max store", withUnit(f.MaxStoreMiB, "MiB"))
	line("store at end", withUnit(f.StoreMiBAtEnd, "MiB"))
	line("store slope, second half", withUnit(f.StoreSlopeMiBPerHour, "MiB/h"))
	line("max WAL", withUnit(f.MaxWALMiB, "MiB"))
	line("max open files", fmt.Sprint(f.MaxOpenFiles))
	line("open files at start", withUnit(f.OpenFilesStart, ""))
	line("open files at end", withUnit(f.OpenFilesEnd, ""))
	line("max goroutines", fmt.Sprint(f.MaxGoroutines))
	line("goroutines at start", withUnit(f.GoroutinesStart, ""))
	line("goroutines at end", withUnit(f.GoroutinesEnd, ""))
	line("node CPU busy, median", withUnit(f.NodeBusyMedianPct, "%"))
	line("node CPU busy, p90", withUnit(f.NodeBusyP90Pct, "%"))
	line("node CPU stolen, median", withUnit(f.NodeStealMedianPct, "%"))
	line("node CPU stolen, most", withUnit(f.NodeStealMaxPct, "%"))
	line("query p99", withUnit(f.QueryP99MS, "ms"))
	line("worst interval's p99", withUnit(f.MaxIntervalP99MS, "ms"))
	line("queries", fmt.Sprint(f.Queries))
	line("queries failed", fmt.Sprint(f.QueryFails))
	line("ring buffer drops", fmt.Sprint(f.RingDrops))
	line("join evictions", fmt.Sprint(f.Evictions))
	line("store rows dropped", fmt.Sprint(f.StoreDropped))
	line("requests acknowledged", fmt.Sprint(f.Acked))
	line("requests verified", fmt.Sprint(f.Verified))
	line("requests lost", fmt.Sprint(f.Lost))
	events := make([]string, len(f.Events))
	for i, e := range f.Events {
		events[i] = fmt.Sprintf("%s at %s", e.What, e.Elapsed.Round(time.Second))
	}
	if len(events) == 0 {
		events = append(events, "none")
	}
	line("events", strings.Join(events, ", "))
	return b.String()
}

// withUnit formats v to two decimals at most, "n/a" when not measured.
func withUnit(v float64, unit string) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	s := num(v)
	switch unit {
	case "":
		return s
	case "%", "/s":
		return s + unit
	}
	return s + " " + unit
}

// num rounds to two decimals and drops trailing zeros: 3.1, 2, 0.05.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}
