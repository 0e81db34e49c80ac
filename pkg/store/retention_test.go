package store

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// busyRetainer deletes one session per pass after taking at least took
// of wall clock, and cancels ctx on its second pass.
type busyRetainer struct {
	took   time.Duration
	passes int
	cancel context.CancelFunc
}

func (r *busyRetainer) DeleteOlderThan(ctx context.Context, _ time.Time) (Deleted, error) {
	r.passes++
	if r.passes > 1 {
		r.cancel()
		return Deleted{}, ctx.Err()
	}
	spin(r.took)
	return Deleted{Sessions: 1}, nil
}

// spin holds the CPU for at least d, as a pass does.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// TestRunRetentionLogsItsDuration: a pass that deleted something is logged
// with how long it and its tidying ran, each at least what it took (the
// soak lines slow queries up against them). Positive control: the
// pass deleted what the retainer said.
func TestRunRetentionLogsItsDuration(t *testing.T) {
	var buf bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	r := &busyRetainer{took: 2 * time.Millisecond, cancel: cancel}
	tidy := func(context.Context) error { spin(200 * time.Millisecond); return nil }
	if err := RunRetention(ctx, r, time.Hour, time.Millisecond, 0.2, zerolog.New(&buf), tidy); err != context.Canceled {
		t.Fatalf("RunRetention = %v, want context.Canceled", err)
	}
	var line struct {
		Message      string  `json:"message"`
		Sessions     int64   `json:"sessions"`
		Took, Tidied float64 // ms
	}
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
		t.Fatalf("one log line: %v\n%s", err, buf.Bytes())
	}
	if line.Message != RetentionPassMessage || line.Sessions != 1 {
		t.Fatalf("logged %+v, want the pass that deleted a session", line)
	}
	// Each its own: the pass's 2 ms cannot hold the tidying's 200 (a wide
	// margin for a busy machine's preemption of the pass).
	if line.Took < 2 || line.Tidied < 200 || line.Took >= line.Tidied {
		t.Errorf("took %.3f ms, tidied %.3f ms; want at least 2 and 200, the pass apart", line.Took, line.Tidied)
	}
}

// TestSpreadWait: a wait lies within half the spread of the interval
// either side, where u puts it; no spread keeps the interval.
func TestSpreadWait(t *testing.T) {
	for _, c := range []struct {
		spread, u float64
		want      time.Duration
	}{
		{0.2, 0, 45 * time.Second},
		{0.2, 0.5, 50 * time.Second},
		{0.2, 0.75, 52500 * time.Millisecond},
		{0.2, 0.999999, 54999990 * time.Microsecond},
		{0, 0, 50 * time.Second},
		{0, 0.999999, 50 * time.Second},
	} {
		if got := spreadWait(50*time.Second, c.spread, c.u); got != c.want {
			t.Errorf("spreadWait(50s, %v, %v) = %v, want %v", c.spread, c.u, got, c.want)
		}
	}
}

// TestRunRetentionRefusesABadSpread: a spread outside [0, 1) is refused
// before any pass; the control, 0, runs one.
func TestRunRetentionRefusesABadSpread(t *testing.T) {
	for _, spread := range []float64{-0.1, 1, 2, math.NaN()} {
		// Were it not refused, the second pass would end the loop.
		ctx, cancel := context.WithCancel(context.Background())
		r := &busyRetainer{cancel: cancel}
		err := RunRetention(ctx, r, time.Hour, time.Millisecond, spread, zerolog.Nop(), nil)
		cancel()
		if err == nil || err == context.Canceled || r.passes != 0 {
			t.Errorf("spread %v: %v after %d passes, want an error before any", spread, err, r.passes)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &busyRetainer{cancel: cancel}
	if err := RunRetention(ctx, r, time.Hour, time.Millisecond, 0, zerolog.Nop(), nil); err != context.Canceled || r.passes != 2 {
		t.Errorf("spread 0: %v after %d passes, want context.Canceled after 2", err, r.passes)
	}
}
