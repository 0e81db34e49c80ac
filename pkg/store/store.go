// Package store is what correlator needs from a store, whatever keeps it:
// the records it writes and reads (Batch, SessionDetail, the filters), the
// Backend interface, its errors, the batching Writer in front of it and
// the retention loop. The backends live beside it: pkg/store/sqlite (the
// embedded default) and pkg/store/elasticsearch (cluster scale); both run
// the contract in pkg/store/storetest.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/execid/correlator/pkg/join"
)

var (
	// ErrNotFound is returned for a session that is not stored.
	ErrNotFound = errors.New("not found")
	// ErrInvalidCursor is returned for a cursor this store did not issue.
	ErrInvalidCursor = errors.New("invalid cursor")
	// ErrClosed is returned by a Writer after Close.
	ErrClosed = errors.New("writer closed")
)

// Backend is what the rest of correlator needs from a store.
//
// List methods return one page, newest first, and the opaque cursor of the
// next page ("" after the last). A session's ProcessCount, FirstProcess and
// LastProcess are the backend's to compute, from the processes attributed
// to it, whatever the written session held. Pages, a session's processes
// and the records' lists (stages, flags) are empty, never nil, when there
// are none: see FillSession and FillProcess.
type Backend interface {
	Write(ctx context.Context, b Batch) error
	ListSessions(ctx context.Context, f SessionFilter) ([]join.Session, string, error)
	GetSession(ctx context.Context, auditID string) (SessionDetail, error)
	ListProcesses(ctx context.Context, f ProcessFilter) ([]join.Process, string, error)
	ListAlerts(ctx context.Context, f AlertFilter) ([]Alert, string, error)
	DeleteOlderThan(ctx context.Context, t time.Time) (Deleted, error)
	Close() error
}

// PageLimit resolves a requested page size the way every backend does: n
// <= 0 is def, and more than max is max.
func PageLimit(n, def, max int) int {
	switch {
	case n <= 0:
		return def
	case n > max:
		return max
	}
	return n
}
