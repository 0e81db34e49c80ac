package soak

import (
	"math"
	"strings"
	"testing"
	"time"
)

const sampleEvery = 10 * time.Second

// readingAt is what a synthetic agent reads at elapsed time d, in MiB, µs.
type readingAt func(d time.Duration) Sample

// flat reads the same every time: 40 MiB RSS, 20 MiB heap.
func flat(time.Duration) Sample {
	return Sample{
		RSSBytes: 40 * mib, AnonBytes: 40 * mib, HeapBytes: 20 * mib, Goroutines: 50, OpenFiles: 30,
		ExecRate: 50, CPUPerExecUS: 40, StoreBytes: 100 * mib, WALBytes: 4 * mib,
	}
}

// run samples agent from from to to (excluded), every sampleEvery.
func samplesOf(agent int, from, to time.Duration, r readingAt) []Sample {
	var out []Sample
	for d := from; d < to; d += sampleEvery {
		s := Sample{Elapsed: d} // no agent: zero readings
		if agent > 0 {
			s = r(d)
			s.Elapsed, s.Agent = d, agent
		}
		out = append(out, s)
	}
	return out
}

// restarted reads like a process started at start: RSS and goroutines
// climb from low to their plateau in its first nine minutes, inside the
// ten-minute warm-up the tests use.
func restarted(start time.Duration) readingAt {
	return func(d time.Duration) Sample {
		s := flat(d)
		if age := d - start; age < 9*time.Minute {
			frac := float64(age) / float64(9*time.Minute)
			s.RSSBytes = int64((10 + 30*frac) * mib)
			s.AnonBytes = s.RSSBytes
			s.HeapBytes = int64((5 + 15*frac) * mib)
			s.Goroutines = 10 + int(40*frac)
		}
		return s
	}
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestSummarizeFlat(t *testing.T) {
	f := Summarize(samplesOf(1, 0, 6*time.Hour, flat), nil, 10*time.Minute, 3)
	if !near(f.MemorySlopeMiBPerHour, 0, 0.01) || !near(f.HeapSlopeMiBPerHour, 0, 0.01) {
		t.Errorf("slopes %v, %v MiB/h, want 0", f.MemorySlopeMiBPerHour, f.HeapSlopeMiBPerHour)
	}
	if f.MaxRSSMiB != 40 || f.MaxHeapMiB != 20 || f.CPUPerExecChangePct != 0 || f.StoreSlopeMiBPerHour != 0 {
		t.Errorf("figures %+v", f)
	}
	if f.SlopeAgent != 1 || f.SlopeFrom != 10*time.Minute || f.Samples != f.SlopeSamples || f.Generations != 1 {
		t.Errorf("segment agent %d from %s, %d of %d samples, %d generations",
			f.SlopeAgent, f.SlopeFrom, f.SlopeSamples, f.Samples, f.Generations)
	}
	if f.QueryP99MS != 3 {
		t.Errorf("query p99 %v, want the caller's 3", f.QueryP99MS)
	}
}

func TestSummarizeLinear(t *testing.T) {
	grow := func(d time.Duration) Sample {
		s := flat(d)
		s.RSSBytes = int64((30 + 6*d.Hours()) * mib)
		s.AnonBytes = s.RSSBytes
		s.HeapBytes = int64((10 + 1.5*d.Hours()) * mib)
		return s
	}
	f := Summarize(samplesOf(1, 0, 6*time.Hour, grow), nil, 10*time.Minute, 0)
	if !near(f.MemorySlopeMiBPerHour, 6, 0.01) || !near(f.HeapSlopeMiBPerHour, 1.5, 0.01) {
		t.Errorf("slopes %v, %v MiB/h, want 6, 1.5", f.MemorySlopeMiBPerHour, f.HeapSlopeMiBPerHour)
	}
	if !near(f.MaxRSSMiB, 30+6*(6-sampleEvery.Hours()), 0.01) {
		t.Errorf("max RSS %v", f.MaxRSSMiB)
	}
}

// TestSummarizeRestOfMemory: RssAnon that steps up only with the Go
// heap's kept pages (bursts the runtime keeps, up to about its goal and a quarter)
// has no slope outside the heap; a rest that grows does, and readings
// without the kept pages (an older run's CSV) give none.
func TestSummarizeRestOfMemory(t *testing.T) {
	steps := func(rest float64) func(time.Duration) Sample {
		return func(d time.Duration) Sample {
			s := flat(d)
			kept := 40 + 2*math.Floor(d.Hours()) // a step each hour
			s.HeapKeptBytes = int64(kept * mib)
			s.NextGCBytes = int64(50 * mib)
			s.AnonBytes = int64((kept + 20 + rest*d.Hours()) * mib)
			return s
		}
	}
	f := Summarize(samplesOf(1, 0, 6*time.Hour, steps(0)), nil, 10*time.Minute, 0)
	if f.MemorySlopeMiBPerHour < 1 || !near(f.RestSlopeMiBPerHour, 0, 0.01) || !near(f.MaxKeptOverGoal, 50.0/50, 0.01) {
		t.Errorf("RssAnon slope %v, outside the heap %v MiB/h, kept/goal %v; want > 1, 0, 1",
			f.MemorySlopeMiBPerHour, f.RestSlopeMiBPerHour, f.MaxKeptOverGoal)
	}
	f = Summarize(samplesOf(1, 0, 6*time.Hour, steps(3)), nil, 10*time.Minute, 0)
	if !near(f.RestSlopeMiBPerHour, 3, 0.01) {
		t.Errorf("outside the heap %v MiB/h, want 3", f.RestSlopeMiBPerHour)
	}
	f = Summarize(samplesOf(1, 0, 6*time.Hour, flat), nil, 10*time.Minute, 0)
	if !math.IsNaN(f.RestSlopeMiBPerHour) || !math.IsNaN(f.MaxKeptOverGoal) {
		t.Errorf("without kept pages: %v, %v, want n/a", f.RestSlopeMiBPerHour, f.MaxKeptOverGoal)
	}
}

// threeAgents is 6 hours: an upgrade at 1h, a kill -9 at 2h30m and 30
// seconds with no agent after each; the third process lives longest.
func threeAgents() ([]Sample, []Event) {
	var s []Sample
	s = append(s, samplesOf(1, 0, time.Hour, restarted(0))...)
	s = append(s, samplesOf(0, time.Hour, time.Hour+30*time.Second, nil)...)
	s = append(s, samplesOf(2, time.Hour+30*time.Second, 150*time.Minute, restarted(time.Hour+30*time.Second))...)
	s = append(s, samplesOf(0, 150*time.Minute, 150*time.Minute+30*time.Second, nil)...)
	s = append(s, samplesOf(3, 150*time.Minute+30*time.Second, 6*time.Hour, restarted(150*time.Minute+30*time.Second))...)
	return s, []Event{{Elapsed: 150 * time.Minute, What: "kill -9"}, {Elapsed: time.Hour, What: "upgrade"}}
}

func TestSummarizeRestarts(t *testing.T) {
	s, ev := threeAgents()
	warm := 10 * time.Minute
	f := Summarize(s, ev, warm, 0)
	if !near(f.MemorySlopeMiBPerHour, 0, 0.01) || !near(f.HeapSlopeMiBPerHour, 0, 0.01) {
		t.Errorf("slopes %v, %v MiB/h across restarts, want 0", f.MemorySlopeMiBPerHour, f.HeapSlopeMiBPerHour)
	}
	if f.SlopeAgent != 3 || f.SlopeFrom != 160*time.Minute+30*time.Second || f.Generations != 3 {
		t.Errorf("segment agent %d from %s, %d generations; want agent 3 from 2h40m30s, 3",
			f.SlopeAgent, f.SlopeFrom, f.Generations)
	}
	if f.GoroutinesStart != 50 || f.GoroutinesEnd != 50 || f.MaxRSSMiB != 40 {
		t.Errorf("goroutines %v to %v, max RSS %v", f.GoroutinesStart, f.GoroutinesEnd, f.MaxRSSMiB)
	}
	if len(f.Events) != 2 || f.Events[0].What != "upgrade" {
		t.Errorf("events %+v, want both in time order", f.Events)
	}
	// Control: one fit over every reading after the warm-up sees the
	// restarts' dips early on and reports a leak, some 0.35 MiB/h here,
	// well above the 0.01 the per-process rule is held to.
	var post []Sample
	for _, x := range s {
		if x.Elapsed >= warm && x.Agent > 0 {
			post = append(post, x)
		}
	}
	naive := slopePerHour(post, func(x Sample) float64 { return float64(x.AnonBytes) / mib })
	if naive < 0.2 {
		t.Errorf("the naive slope is %v MiB/h: the restarts in this test do not bite", naive)
	}
}

func TestSummarizeIgnoresNoAgent(t *testing.T) {
	var s []Sample
	s = append(s, samplesOf(0, 0, 5*time.Minute, nil)...)
	for i, x := range samplesOf(1, 5*time.Minute, 3*time.Hour, flat) {
		if i%7 == 3 {
			x = Sample{Elapsed: x.Elapsed} // a reading that missed the agent
		}
		s = append(s, x)
	}
	s = append(s, samplesOf(0, 3*time.Hour, 3*time.Hour+time.Minute, nil)...)
	f := Summarize(s, nil, 10*time.Minute, 0)
	if !near(f.MemorySlopeMiBPerHour, 0, 0.01) || f.SlopeAgent != 1 || f.SlopeFrom != 15*time.Minute {
		t.Errorf("slope %v on agent %d from %s", f.MemorySlopeMiBPerHour, f.SlopeAgent, f.SlopeFrom)
	}
	if f.CPUPerExecStartUS != 40 || f.OpenFilesEnd != 30 || f.ExecRateMedian != 50 || f.StoreMiBAtEnd != 100 {
		t.Errorf("zero readings counted: %+v", f)
	}
}

func TestSummarizeFigures(t *testing.T) {
	const hours = 4
	r := func(d time.Duration) Sample {
		s := flat(d)
		h := d.Hours()
		s.NodeBusy, s.NodeSteal = 0.3, 0.01
		if h >= hours/2 {
			s.CPUPerExecUS = 44 // 10% more in the second half
			s.OpenFiles, s.Goroutines = 32, 55
			s.NodeBusy = 0.5
		}
		if int(d/sampleEvery)%10 == 0 {
			s.ExecRate, s.CPUPerExecUS = 0, 0 // an idle interval
			s.NodeBusy, s.NodeSteal = 0, 0    // and the node's times not read
		}
		s.StoreBytes = int64(min(200, 100*h) * mib) // bounded by retention from 2h
		s.WALBytes = int64(min(8, 2+h) * mib)
		s.RingDrops, s.Evictions, s.StoreDropped = 1, int64(h*10), 2
		s.Acked, s.Verified, s.Lost = int64(d/sampleEvery), int64(d/sampleEvery)-1, 0
		s.Queries, s.QueryP99MS, s.QueryFails = 2, 1+h, 1
		if d == time.Hour {
			s.ExecRate = 90
			s.NodeSteal = 0.2
		}
		return s
	}
	s := samplesOf(1, 0, hours*time.Hour, r)
	s = append(s, samplesOf(0, hours*time.Hour, hours*time.Hour+time.Minute, nil)...) // zeros at the end
	f := Summarize(s, nil, 10*time.Minute, 5)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"CPU at start", f.CPUPerExecStartUS, 40},
		{"CPU at end", f.CPUPerExecEndUS, 44},
		{"CPU change", f.CPUPerExecChangePct, 10},
		{"exec rate median", f.ExecRateMedian, 50},
		{"exec rate max", f.ExecRateMax, 90},
		{"max store", f.MaxStoreMiB, 200},
		{"store at end", f.StoreMiBAtEnd, 200},
		{"store slope", f.StoreSlopeMiBPerHour, 0},
		{"max WAL", f.MaxWALMiB, 2 + (hours*time.Hour - sampleEvery).Hours()},
		{"open files at start", f.OpenFilesStart, 30},
		{"open files at end", f.OpenFilesEnd, 32},
		{"max open files", float64(f.MaxOpenFiles), 32},
		{"goroutines at end", f.GoroutinesEnd, 55},
		{"max interval p99", f.MaxIntervalP99MS, 1 + (hours*time.Hour - sampleEvery).Hours()},
		{"queries", float64(f.Queries), float64(2 * hours * 360)},
		{"query fails", float64(f.QueryFails), 1},
		{"ring drops", float64(f.RingDrops), 1},
		{"store dropped", float64(f.StoreDropped), 2},
		{"acked", float64(f.Acked), hours*360 - 1},
		{"verified", float64(f.Verified), hours*360 - 2},
		{"node busy median", f.NodeBusyMedianPct, 50}, // 110 minutes at 30 % past the warm-up, 120 at 50
		{"node busy p90", f.NodeBusyP90Pct, 50},
		{"node steal median", f.NodeStealMedianPct, 1},
		{"node steal most", f.NodeStealMaxPct, 20},
	} {
		if !near(c.got, c.want, 1e-6) {
			t.Errorf("%s %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestSummarizeTooShort(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []Sample
	}{
		{"none", nil},
		{"no agent", samplesOf(0, 0, time.Hour, nil)},
		{"all in the warm-up", samplesOf(1, 0, 10*time.Minute, flat)},
		{"nine after it", samplesOf(1, 0, 10*time.Minute+9*sampleEvery, flat)},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := Summarize(c.samples, nil, 10*time.Minute, 1)
			if !math.IsNaN(f.MemorySlopeMiBPerHour) || !math.IsNaN(f.CPUPerExecChangePct) || f.SlopeAgent != 0 {
				t.Errorf("slope %v, CPU change %v on agent %d from too few samples, want NaN",
					f.MemorySlopeMiBPerHour, f.CPUPerExecChangePct, f.SlopeAgent)
			}
			if !strings.Contains(f.String(), "n/a") {
				t.Errorf("String does not say n/a:\n%s", f)
			}
		})
	}
}

// A process too short-lived to span a tenth of the run is not measured,
// however many samples it has.
func TestSummarizeShortGenerations(t *testing.T) {
	var s []Sample
	for a := 1; a <= 12; a++ {
		from := time.Duration(a-1) * 30 * time.Minute
		s = append(s, samplesOf(a, from, from+30*time.Minute, restarted(from))...)
	}
	f := Summarize(s, nil, 10*time.Minute, 1)
	if f.SlopeAgent != 0 || !math.IsNaN(f.MemorySlopeMiBPerHour) {
		t.Errorf("slope %v on agent %d, want none: 20 minutes is under a tenth of 5h50m", f.MemorySlopeMiBPerHour, f.SlopeAgent)
	}
}

func TestFiguresString(t *testing.T) {
	s, ev := threeAgents()
	text := Summarize(s, ev, 10*time.Minute, 2.5).String()
	for _, want := range []string{
		"duration                   5h59m50s\n",
		"slopes measured on         agent 3, 2h40m30s to 5h59m50s, 1197 samples\n",
		"memory (RssAnon) slope     0 MiB/h\n",
		"max RssAnon                40 MiB\n",
		"CPU per exec change        0%\n",
		"exec rate, median          50/s\n",
		"query p99                  2.5 ms\n",
		"node CPU busy, median      n/a\n",
		"worst interval's p99       n/a\n",
		"events                     upgrade at 1h0m0s, kill -9 at 2h30m0s\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
}

// TestSummarizeNodeUnread: readings whose node times were not read (0
// busy, 0 stolen) are left out of the node's figures, not counted idle.
func TestSummarizeNodeUnread(t *testing.T) {
	s := samplesOf(1, 0, 2*time.Hour, func(d time.Duration) Sample {
		x := flat(d)
		if int(d/sampleEvery)%5 < 2 {
			x.NodeBusy, x.NodeSteal = 0.4, 0.02
		}
		return x
	})
	f := Summarize(s, nil, 10*time.Minute, 1)
	if f.NodeBusyMedianPct != 40 || f.NodeStealMedianPct != 2 || f.NodeBusyP90Pct != 40 {
		t.Errorf("node busy median %v, p90 %v, stolen median %v; want 40, 40, 2", f.NodeBusyMedianPct, f.NodeBusyP90Pct, f.NodeStealMedianPct)
	}
}
