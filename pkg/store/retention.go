package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rs/zerolog"
)

// Deleted counts the rows one retention pass removed.
type Deleted struct {
	Sessions     int64 `json:"sessions"`
	Processes    int64 `json:"processes"`
	AuditRecords int64 `json:"auditRecords"`
	Alerts       int64 `json:"alerts"`
}

// RetentionPassMessage is the log message of a retention pass that deleted
// something, with its counts and how long it ran (took, tidied; ms): the
// soak reads the agent's log for it.
const RetentionPassMessage = "retention deleted old records"

// Retainer is a store that deletes by age what stopped mattering before t:
// processes that exited before it (running ones stay, however old);
// sessions that ended before it (or, never seen to end, were received
// before it) with no process left, and their audit records; audit records
// before it of no stored session; and alerts before it.
type Retainer interface {
	DeleteOlderThan(ctx context.Context, t time.Time) (Deleted, error)
}

// RunRetention is every backend's retention loop: r.DeleteOlderThan every
// interval until ctx is done, logging each pass that deleted something and
// then calling tidy (may be nil). Each wait, from one pass's start to the
// next's, is interval spread at random over spread of it, half either side
// (0: exactly interval), so the passes do not fall at one phase of other
// periodic work on the node (a responder's script, a scrape) for the
// agent's life. It returns ctx's error.
func RunRetention(ctx context.Context, r Retainer, maxAge, interval time.Duration, spread float64, log zerolog.Logger, tidy func(context.Context) error) error {
	if maxAge <= 0 || interval <= 0 {
		return fmt.Errorf("starting retention: max age %s and interval %s must be positive", maxAge, interval)
	}
	if !(spread >= 0 && spread < 1) {
		return fmt.Errorf("starting retention: spread %v must be at least 0 and under 1", spread)
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		start := time.Now()
		d, err := r.DeleteOlderThan(ctx, start.Add(-maxAge))
		took := time.Since(start)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn().Err(err).Msg("applying retention")
		case d != (Deleted{}):
			// How long the pass and its tidying ran (ms), logged at their
			// end: a pass holds the store's writer and a CPU meanwhile.
			var tidied time.Duration
			if tidy != nil {
				if err := tidy(ctx); err != nil && ctx.Err() == nil {
					log.Warn().Err(err).Msg("tidying the store after retention")
				}
				tidied = time.Since(start) - took
			}
			log.Info().Int64("sessions", d.Sessions).Int64("processes", d.Processes).
				Int64("auditRecords", d.AuditRecords).Int64("alerts", d.Alerts).
				Dur("maxAge", maxAge).Dur("took", took).Dur("tidied", tidied).Msg(RetentionPassMessage)
		}
		// A pass longer than its wait is followed at once, as a ticker's
		// buffered tick would be.
		timer.Reset(max(0, time.Until(start.Add(spreadWait(interval, spread, rand.Float64())))))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// spreadWait is interval moved by spread of it, u (in [0, 1)) placing it
// from half of spread before to half after.
func spreadWait(interval time.Duration, spread, u float64) time.Duration {
	return time.Duration(float64(interval) * (1 - spread/2 + spread*u))
}
