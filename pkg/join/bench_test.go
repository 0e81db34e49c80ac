package join

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// BenchmarkJoin pushes exec events through AddProcess with their records
// already held: a root and descendants per session, each session with an
// ID of its own and its descendants naming their root as the kernel does,
// exits keeping the table near steady state.
func BenchmarkJoin(b *testing.B) {
	j := newJoiner(b, func(c *Config) { c.MaxProcesses = 200_000 })
	sessions := b.N/8 + 1
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		j.AddRecord(t0, xr(ids[i]))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s := i / 8
		p := pr(fmt.Sprintf("%d-%d", i, i), fmt.Sprintf("%d-%d", i-1, i-1), ids[s], vocab.SourceInherited)
		p.SessionRootID = fmt.Sprintf("%d-%d", s*8, s*8)
		if i%8 == 0 {
			p.ParentProcessID, p.Captured.Source = "runc", vocab.SourceEnv
		}
		if len(j.AddProcess(t0, p)) == 0 {
			b.Fatal("no update")
		}
		if i >= 64 {
			j.AddExit(t0, Exit{ProcessID: fmt.Sprintf("%d-%d", i-64, i-64), Time: t0})
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkJoinHeuristic is the fallback path: ID-less exec roots matched
// against 20 overlapping sessions in one pod.
func BenchmarkJoinHeuristic(b *testing.B) {
	j := newJoiner(b, func(c *Config) { c.MaxProcesses = 100_000 })
	addHeuristicRecords(j)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p := with(pr(fmt.Sprintf("h%d", i), "runc", "", ""), argv("sh", "-c", fmt.Sprint(i%20)))
		p.Start = t0.Add(time.Duration(i%20) * time.Second)
		// Each root's window and holds have closed: it is decided at once.
		us := j.AddProcess(windowsClosed(t0.Add(20*time.Second)), p)
		if len(us) == 0 || (us[0].Process != nil && us[0].Process.Attribution == vocab.AttributionNone) {
			b.Fatal("not attributed")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// addHeuristicRecords holds 20 requests of one pod, a second apart, each
// with its own command.
func addHeuristicRecords(j *Joiner) {
	for i := range 20 {
		r := xr(fmt.Sprintf("h-%d", i), "sh", "-c", fmt.Sprint(i))
		r.RequestReceivedTimestamp = t0.Add(time.Duration(i) * time.Second)
		j.AddRecord(t0, r)
	}
}

// BenchmarkJoinHeuristicSettle is the node's way: each ID-less root is
// added as it starts (no answer yet), and the expiry tick past its window
// decides it. Per root: its resolution on arrival, its wait in the window
// queue, and its resolution when the window and holds close.
func BenchmarkJoinHeuristicSettle(b *testing.B) {
	j := newJoiner(b, func(c *Config) { c.MaxProcesses = 100_000 })
	addHeuristicRecords(j)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p := with(pr(fmt.Sprintf("h%d", i), "runc", "", ""), argv("sh", "-c", fmt.Sprint(i%20)))
		p.Start = t0.Add(time.Duration(i%20) * time.Second)
		j.AddProcess(p.Start, p)
	}
	us := j.Expire(windowsClosed(t0.Add(20 * time.Second)))
	if len(us) < b.N {
		b.Fatalf("%d updates for %d roots", len(us), b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roots/s")
}

// BenchmarkJoinLatency measures, per session, the time from the second
// side's arrival to the attributed Update being returned: record after a
// root and three descendants, and process after its record.
func BenchmarkJoinLatency(b *testing.B) {
	for _, side := range []string{"record-last", "process-last"} {
		b.Run(side, func(b *testing.B) {
			j := newJoiner(b)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("lat-%d", i)
				root := fmt.Sprintf("r%d", i)
				var start time.Time
				var us []Update
				if side == "record-last" {
					j.AddProcess(t0, pr(root, "runc", id, vocab.SourceEnv))
					for k := range 3 {
						j.AddProcess(t0, pr(fmt.Sprintf("%s-%d", root, k), root, id, vocab.SourceInherited))
					}
					start = time.Now()
					us = j.AddRecord(t0, xr(id))
				} else {
					j.AddRecord(t0, xr(id))
					start = time.Now()
					us = j.AddProcess(t0, pr(root, "runc", id, vocab.SourceEnv))
				}
				lat = append(lat, time.Since(start))
				if !slices.ContainsFunc(us, func(u Update) bool {
					return u.Process != nil && u.Process.Attribution == vocab.AttributionAuditID
				}) {
					b.Fatal("no attributed update")
				}
				j.AddExit(t0, Exit{ProcessID: root, Time: t0})
				for k := range 3 {
					j.AddExit(t0, Exit{ProcessID: fmt.Sprintf("%s-%d", root, k), Time: t0})
				}
				if i%1024 == 1023 {
					j.Expire(t0.Add(time.Hour)) // forget exited processes and idle records
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
