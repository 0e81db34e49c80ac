package join

import (
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// BenchmarkJoinBusyPod is make soak's node in the joiner alone: one pod,
// four exec sessions a second for the given span, one in ten without an
// ID (the heuristic's), each a root and three children that exit at once,
// its record two seconds later, the expiry tick every second. The late
// window holds the ID-less sessions for an hour, so a record's cost must
// not grow with what is held: µs/session at 10 and 30 minutes should be
// alike (before the fix they grew with the held roots: the soak's agent
// spent a whole core in candidates at 17 minutes).
func BenchmarkJoinBusyPod(b *testing.B) {
	for _, span := range []time.Duration{10 * time.Minute, 30 * time.Minute} {
		b.Run(fmt.Sprintf("span=%s", span), func(b *testing.B) {
			sessions := int(span / (250 * time.Millisecond))
			for b.Loop() {
				j := newJoiner(b, func(c *Config) { c.MaxProcesses = 1_000_000; c.MaxRecords = 1_000_000; c.MaxPending = 1_000_000 })
				busyPod(b, j, sessions)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*sessions), "µs/session")
		})
	}
}

func busyPod(b *testing.B, j *Joiner, sessions int) {
	busyPodFor(j, time.Duration(sessions)*250*time.Millisecond, nil)
	if s := j.Stats(); s.Processes == 0 {
		b.Fatal("nothing held")
	}
}

// busyPodFor drives j as BenchmarkJoinBusyPod does for span, calling each
// (if set) at every whole minute of it.
func busyPodFor(j *Joiner, span time.Duration, each func(time.Duration)) {
	next := t0
	var records []timedRecord
	for i := range int(span / (250 * time.Millisecond)) {
		at := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		for !next.After(at) {
			j.Expire(next)
			next = next.Add(time.Second)
		}
		if each != nil && at.Sub(t0)%time.Minute == 0 {
			each(at.Sub(t0))
		}
		for len(records) > 0 && !records[0].at.After(at) {
			j.AddRecord(at, records[0].rec)
			records = records[1:]
		}
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		cmd := []string{"sh", "-c", fmt.Sprint(i)}
		key := id
		if i%10 == 9 {
			key = ""
		}
		root := with(pr(fmt.Sprintf("r%d", i), "runc", key, vocab.SourceEnv), argv(cmd...))
		root.Start, root.ExecTime = at, at
		j.AddProcess(at, root)
		for c := range 3 {
			ch := with(pr(fmt.Sprintf("c%d-%d", i, c), root.ProcessID, key, vocab.SourceInherited), argv("/bin/true"))
			ch.Start, ch.ExecTime = at, at
			j.AddProcess(at, ch)
			j.AddExit(at, Exit{ProcessID: ch.ProcessID, Time: at})
		}
		j.AddExit(at, Exit{ProcessID: root.ProcessID, Time: at})
		rec := xr(id, cmd...)
		rec.RequestReceivedTimestamp, rec.EndTimestamp = at, at.Add(time.Second)
		records = append(records, timedRecord{at: at.Add(2 * time.Second), rec: rec})
	}
}

type timedRecord struct {
	at  time.Time
	rec auditlog.ExecRecord
}
