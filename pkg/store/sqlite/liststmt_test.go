package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/store"
)

// TestListStatementsBounded: list pages run through statements prepared
// once per distinct query, at most maxListStmts of them; past the bound a
// query is prepared for its one use. Every filter combination answers the
// same whether its statement was kept or not, and the same again.
func TestListStatementsBounded(t *testing.T) {
	s := filterFixture(t)
	ctx := context.Background()
	values := []func(*store.SessionFilter){
		func(f *store.SessionFilter) { f.User = "alice" },
		func(f *store.SessionFilter) { f.Group = "admins" },
		func(f *store.SessionFilter) { f.Namespace = "default" },
		func(f *store.SessionFilter) { f.Pod = "web-0" },
		func(f *store.SessionFilter) { f.Container = "app" },
		func(f *store.SessionFilter) { f.Command = "echo" },
		func(f *store.SessionFilter) { f.Since = base.Add(-time.Hour) },
		func(f *store.SessionFilter) { f.Until = base.Add(time.Hour) },
	}
	pass := func() [][]string {
		var out [][]string
		for mask := range 1 << len(values) {
			f := store.SessionFilter{Limit: 10}
			for i, set := range values {
				if mask&(1<<i) != 0 {
					set(&f)
				}
			}
			page, _, err := s.ListSessions(ctx, f)
			if err != nil {
				t.Fatalf("filter %08b: %v", mask, err)
			}
			var ids []string
			for _, ss := range page {
				ids = append(ids, ss.AuditID)
			}
			out = append(out, ids)
		}
		return out
	}
	first := pass()
	if n := s.lists.size(); n != maxListStmts {
		t.Fatalf("%d list statements kept after 256 distinct queries, want the bound %d", n, maxListStmts)
	}
	if second := pass(); !slices.EqualFunc(first, second, slices.Equal) {
		t.Fatalf("answers changed once statements were kept:\n%v\n%v", first, second)
	}
	// Known answers, one kept and one past the bound.
	if got := first[1]; !slices.Equal(got, []string{"s4", "s3", "s1"}) {
		t.Errorf("user alice: %v", got)
	}
	if got := first[len(first)-1]; len(got) > 1 {
		t.Errorf("every filter at once: %v", got)
	}
}

// TestListPrepareWhileConnectionsBusy: preparing a new list statement while
// every read connection is held by a transaction that then looks a
// statement up does not wait for ever: the preparer waits for a connection
// without holding the cache, so the transaction finishes and frees its own.
func TestListPrepareWhileConnectionsBusy(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "store.db"), Config{ReadConns: 1}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	prepared := make(chan error, 1)
	go func() { prepared <- s.prepareList(ctx, "SELECT 1 WHERE ? = 1") }()
	// The preparer now waits for the connection; the transaction still
	// looks statements up (listTx), then ends.
	testutil.Eventually(t, "the preparer waits for a connection", func() bool { return s.r.Stats().WaitCount > 0 })
	ended := make(chan error, 1)
	go func() {
		rows, err := listTx{s, tx}.QueryContext(ctx, "SELECT 2")
		if err == nil {
			rows.Close()
		}
		tx.Rollback()
		ended <- err
	}()
	bound := time.After(testutil.EventuallyBound) // only a broken store reaches it
	for _, ch := range []chan error{ended, prepared} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-bound:
			t.Fatal("a transaction and a list statement's preparation waited on each other for ever")
		}
	}
	if s.lists.lookup("SELECT 1 WHERE ? = 1") == nil {
		t.Fatal("the statement was not kept")
	}
}
