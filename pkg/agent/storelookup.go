package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// SessionReader is the part of a store the stored-records lookup reads.
type SessionReader interface {
	GetSession(ctx context.Context, auditID string) (store.SessionDetail, error)
}

// StoredRecords looks audit records up in the agent's own store, where
// every exec stage is kept as it was parsed. After a restart the joiner
// starts empty and the audit sources resume past what they already read:
// without this, a live session's later commands would wait for a record
// that was delivered before the restart.
type StoredRecords struct {
	r SessionReader
}

// NewStoredRecords returns a lookup over r.
func NewStoredRecords(r SessionReader) *StoredRecords { return &StoredRecords{r: r} }

// LookupExec implements auditlog.Lookup.
func (s *StoredRecords) LookupExec(ctx context.Context, auditID string) ([]auditlog.ExecRecord, error) {
	d, err := s.r.GetSession(ctx, auditID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading stored session %s: %w", auditID, err)
	}
	return recordsOf(auditID, d.AuditRecords), nil
}

// LookupRoots implements RootLookup: the processes stored under auditID,
// its members and its claimants (a reused root waits as a claimant).
func (s *StoredRecords) LookupRoots(ctx context.Context, auditID string) ([]join.Process, error) {
	d, err := s.r.GetSession(ctx, auditID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading stored roots of %s: %w", auditID, err)
	}
	return append(d.Processes, d.Claimants...), nil
}

// LookupRoots implements RootLookup with the first lookup that keeps roots.
func (ls Lookups) LookupRoots(ctx context.Context, auditID string) ([]join.Process, error) {
	for _, l := range ls {
		if rl, ok := l.(RootLookup); ok {
			return rl.LookupRoots(ctx, auditID)
		}
	}
	return nil, nil
}

// recordsOf folds stored stages back into exec records, as the sources
// first did: the same parser, the same merger.
func recordsOf(auditID string, stages []store.AuditRecord) []auditlog.ExecRecord {
	p := auditlog.NewParser(0)
	m := auditlog.NewMerger(auditlog.MergerConfig{})
	for _, st := range stages {
		for _, ev := range p.ParseDocument(st.Event) {
			m.Add(ev)
		}
	}
	return m.Lookup(auditID)
}

// Lookups asks each lookup in turn and returns the first that has records.
type Lookups []auditlog.Lookup

// LookupExec implements auditlog.Lookup; an error is returned only when no
// lookup had records.
func (ls Lookups) LookupExec(ctx context.Context, auditID string) ([]auditlog.ExecRecord, error) {
	var errs []error
	for _, l := range ls {
		recs, err := l.LookupExec(ctx, auditID)
		if len(recs) > 0 {
			return recs, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return nil, errors.Join(errs...)
}
