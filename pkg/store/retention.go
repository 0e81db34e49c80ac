package store

import (
	"context"
	"fmt"
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
// then calling tidy (may be nil). It returns ctx's error.
func RunRetention(ctx context.Context, r Retainer, maxAge, interval time.Duration, log zerolog.Logger, tidy func(context.Context) error) error {
	if maxAge <= 0 || interval <= 0 {
		return fmt.Errorf("starting retention: max age %s and interval %s must be positive", maxAge, interval)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
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
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
