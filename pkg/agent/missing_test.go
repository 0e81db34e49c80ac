package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestMissingAuditIDsKeptApart: two exec requests whose records lost their
// audit ID (a simplified pipeline) are two sessions, each flagged
// missing_audit_id under its own synthetic key with its stages kept as
// evidence, never one session flagged audit_id_conflict. The control: one
// request's two stages still make one session.
func TestMissingAuditIDsKeptApart(t *testing.T) {
	a, st, _ := startAgentIn(t, staticMeta{})
	ctx := context.Background()
	p := auditlog.NewParser(0)
	now := time.Now().Truncate(time.Millisecond)
	for i, user := range []string{"alice", "bob"} {
		for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
			if err := a.AuditSink()(ctx, p.ParseLine(execLine("", user, now.Add(time.Duration(i)*time.Second), stage))); err != nil {
				t.Fatal(err)
			}
		}
	}
	var ids []string
	testutil.EventuallyNil(t, func() error {
		ss, _, err := st.ListSessions(ctx, store.SessionFilter{})
		if err != nil {
			return err
		}
		ids = ids[:0]
		for _, s := range ss {
			if !strings.HasPrefix(s.AuditID, auditlog.MissingIDPrefix) || !slices.Contains(s.Flags, vocab.FlagMissingAuditID) ||
				slices.Contains(s.Flags, vocab.FlagAuditIDConflict) {
				return fmt.Errorf("session %s flags %v: want a %s key, missing_audit_id and no conflict", s.AuditID, s.Flags, auditlog.MissingIDPrefix)
			}
			ids = append(ids, s.AuditID)
		}
		if len(ss) != 2 {
			return fmt.Errorf("%d sessions, want 2 (one per request)", len(ss))
		}
		return nil
	})
	for _, id := range ids {
		d, err := st.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.AuditRecords) != 2 {
			t.Errorf("session %s (%s): %d audit stages kept, want 2", id, d.User.Username, len(d.AuditRecords))
		}
	}
}
