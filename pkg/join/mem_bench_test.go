package join

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// BenchmarkJoinLiveProcesses holds 100,000 live session processes, 1,000
// sessions of a root and 99 children as BenchmarkLiveProcesses100k in
// pkg/agent feeds them (and 10,000 sessions of 10), and reports the live heap per process (B/process),
// then what each structure holds per process: the heap freed by dropping
// it, in this order, so what two structures share counts for the last.
// One op is the whole 100k, done once whatever b.N is.
func BenchmarkJoinLiveProcesses(b *testing.B) {
	for _, perSession := range []int{100, 10} {
		b.Run(fmt.Sprintf("per-session=%d", perSession), func(b *testing.B) { liveProcesses(b, 100_000/perSession, perSession) })
	}
}

func liveProcesses(b *testing.B, sessions, perSession int) {
	base := liveHeap()
	j := newJoiner(b)
	addLive(b, j, sessions, perSession)
	n := sessions * perSession
	held := liveHeap()
	b.ReportMetric(float64(held-base)/float64(n), "B/process")
	b.ReportMetric(float64(j.Stats().ProcessBytes)/float64(n), "estimated-B/process")
	var kept []*proc
	steps := []struct {
		unit string
		drop func()
	}{
		{"queues-B/process", func() { j.procq, j.exitq = procQueue{}, queue{} }},
		{"deps-B/process", func() { j.deps = nil }},
		{"ids-B/process", func() { j.ids = nil }},
		{"members-B/process", func() {
			for _, rs := range j.recs {
				rs.members = nil
			}
		}},
		{"procs-map-B/process", func() {
			kept = make([]*proc, 0, j.procs.len())
			for p := range j.procs.all() {
				kept = append(kept, p)
			}
			j.procs = ptable{}
			held += int64(8 * cap(kept)) // kept's own array is no process's
		}},
		{"procs-B/process", func() { held, kept = held-int64(8*cap(kept)), nil }},
		{"roots-B/process", func() { j.roots, j.pairs, j.rootq = nil, nil, queue{} }},
		{"records-B/process", func() { j.recs, j.recq, j.intern = nil, queue{}, nil }},
		{"rest-B/process", func() { j = nil }},
	}
	for _, s := range steps {
		s.drop()
		now := liveHeap()
		b.ReportMetric(float64(held-now)/float64(n), s.unit)
		held = now
	}
}

// addLive adds sessions of a root and perSession-1 children, all live and
// attributed, as BenchmarkLiveProcesses100k in pkg/agent feeds them.
func addLive(tb testing.TB, j *Joiner, sessions, perSession int) {
	tb.Helper()
	for s := range sessions {
		id := "0b5e1c8a-0000-4000-8000-" + strconv.Itoa(100_000_000_000+s)
		j.AddRecord(t0, xr(id))
		for c := range perSession {
			// Every ID a fresh string, as the kernel's decoder makes them.
			p := pr(procKey(s*perSession+c), procKey(90), id, vocab.SourceInherited)
			p.Captured.Value = strings.Clone(id)
			p.Filename, p.Argv = strings.Clone("/bin/sleep"), []string{strings.Clone("sleep"), strings.Clone("infinity")}
			p.SessionRootID = procKey(s * perSession)
			if c == 0 {
				p.Captured.Source, p.Filename, p.Argv = vocab.SourceEnv, strings.Clone("/bin/sh"), []string{strings.Clone("sh")}
			} else {
				p.ParentProcessID = procKey(s * perSession)
			}
			j.AddProcess(t0.Add(time.Second), p)
		}
	}
	if st := j.Stats(); st.Processes != sessions*perSession || st.Pending != 0 {
		tb.Fatalf("holding %d processes, %d pending", st.Processes, st.Pending)
	}
}

// TestProcessBytesTrackHeap: MaxProcessBytes bounds what processes really
// hold. The estimate may be over the heap they take, by a little.
func TestProcessBytesTrackHeap(t *testing.T) {
	base := liveHeap()
	j := newJoiner(t)
	addLive(t, j, 200, 100)
	held := liveHeap() - base
	est := int64(j.Stats().ProcessBytes)
	if est < held*9/10 || est > held*3/2 {
		t.Fatalf("estimated %d bytes, the heap holds %d", est, held)
	}
	runtime.KeepAlive(j)
}

// procKey is a process ID as capture.ProcessKey makes it, freshly allocated.
func procKey(i int) string {
	return strconv.Itoa(1000+i) + "-" + strconv.Itoa(5_000_000+i)
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
