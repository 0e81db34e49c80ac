package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/execid/correlator/pkg/store"
)

// passMessage is the agent's log message for a retention pass that
// deleted something, written at the pass's end.
const passMessage = store.RetentionPassMessage

// Pass is one retention pass of an agent: from its start to the end of
// its tidying, as its log line says.
type Pass struct {
	Start, End time.Time
}

// parsePasses reads an agent's log for its retention passes: every line
// whose message is passMessage is counted in n; those whose time and durations read
// are in passes (a line of an agent before the fields were logged, or a
// torn last line, counts without a span).
func parsePasses(log []byte) (passes []Pass, n int) {
	for line := range bytes.Lines(log) {
		if !bytes.Contains(line, []byte(`"message":"`+passMessage+`"`)) {
			continue
		}
		n++
		var e struct {
			Message      string   `json:"message"`
			Time         string   `json:"time"`
			Took, Tidied *float64 // ms
		}
		if json.Unmarshal(line, &e) != nil || e.Message != passMessage || e.Took == nil || e.Tidied == nil {
			continue
		}
		end, err := time.Parse(time.RFC3339Nano, e.Time)
		ms := *e.Took + *e.Tidied
		if err != nil || *e.Took < 0 || *e.Tidied < 0 || ms > float64(24*time.Hour/time.Millisecond) {
			continue // not a pass's: past a day, it would not fit a Duration either
		}
		span := time.Duration(ms * float64(time.Millisecond))
		passes = append(passes, Pass{Start: end.Add(-span), End: end})
	}
	return passes, n
}

// PassOverlap is how many queries, the slow ones and the others, were out
// while a retention pass ran.
type PassOverlap struct {
	Slow, SlowDuring, Other, OtherDuring int
}

// passOverlap counts the queries of qs over slow, and the others, that
// overlapped one of passes (a query from At to At+Took; the passes in
// any order).
func passOverlap(qs []Query, passes []Pass, slow time.Duration) PassOverlap {
	var o PassOverlap
	for _, q := range qs {
		during := false
		for _, p := range passes {
			if q.At.Before(p.End) && p.Start.Before(q.At.Add(q.Took)) {
				during = true
				break
			}
		}
		if q.Took > slow {
			o.Slow++
			o.SlowDuring += b2i(during)
		} else {
			o.Other++
			o.OtherDuring += b2i(during)
		}
	}
	return o
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// formatPasses is the figures' line on retention: the passes' lengths and
// the share of slow and other queries that overlapped one.
func formatPasses(passes []Pass, o PassOverlap, slow time.Duration) string {
	ds := make([]time.Duration, len(passes))
	for i, p := range passes {
		ds[i] = p.End.Sub(p.Start)
	}
	return fmt.Sprintf("retention passes timed: %d, p50 %.1f, p90 %.1f, most %.1f ms; queries over %v during one: %d of %d (%s), others: %d of %d (%s)",
		len(passes), quantileMS(ds, 0.5), quantileMS(ds, 0.9), quantileMS(ds, 1), slow,
		o.SlowDuring, o.Slow, percent(o.SlowDuring, o.Slow), o.OtherDuring, o.Other, percent(o.OtherDuring, o.Other))
}

func percent(part, whole int) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(part)/float64(whole))
}
