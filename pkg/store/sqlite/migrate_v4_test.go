package sqlite

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestMigrateFromV4 builds a version-4 file (an exit index, and an
// attribution index over every row) holding a root, a running child and
// an exited child, then checks that Open drops the exit
// index, keeps inherited processes out of the attribution index, and that
// the rows, the attribution filter and retention read as before.
func TestMigrateFromV4(t *testing.T) {
	db, path := oldFile(t, 4, nil)
	// The rows as version 4's writer made them: its upsert is this one.
	root := process("root", "s1", 1)
	child := process("child", "s1", 2)
	child.Attribution = vocab.AttributionInherited
	old := process("old", "s1", 3)
	old.Attribution = vocab.AttributionInherited
	old.Exit = base.Add(10 * time.Second)
	insertOldProcesses(t, db, root, child, old)
	db.Close()

	s := openMigrated(t, path)
	ctx := context.Background()
	indexSQL := func(name string) string {
		var q sql.NullString
		if err := s.r.QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE name = ?", name).Scan(&q); err != nil &&
			err != sql.ErrNoRows {
			t.Fatal(err)
		}
		return q.String
	}
	if q := indexSQL("processes_exit"); q != "" {
		t.Errorf("processes_exit after migration: %s", q)
	}
	if q := indexSQL("processes_attribution"); !strings.Contains(q, "WHERE attribution != 'inherited'") {
		t.Errorf("processes_attribution after migration: %q", q)
	}
	list := func(f store.ProcessFilter) []string {
		got, _, err := s.ListProcesses(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return processIDs(got)
	}
	for _, c := range []struct {
		f    store.ProcessFilter
		want []string
	}{
		{store.ProcessFilter{}, []string{"old", "child", "root"}},
		{store.ProcessFilter{Attribution: vocab.AttributionAuditID}, []string{"root"}},
		{store.ProcessFilter{Attribution: vocab.AttributionInherited}, []string{"old", "child"}},
	} {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("processes %+v after migration: %v, want %v", c.f, got, c.want)
		}
	}
	d, err := s.DeleteOlderThan(ctx, base.Add(time.Minute))
	if err != nil || d.Processes != 1 {
		t.Fatalf("retention after migration deleted %d processes (%v), want 1", d.Processes, err)
	}
	if got := list(store.ProcessFilter{}); !slices.Equal(got, []string{"child", "root"}) {
		t.Errorf("after retention: %v", got)
	}
}
