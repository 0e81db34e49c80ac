package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
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

// TestCommandSearchStatementsFew: a command search names the matching
// commands in an IN list, padded to a power of two, so a store whose
// matches keep changing in number keeps a statement per power, not one per
// count (the soak's agent filled the cache with them, each prepared on every
// reader connection, in SQLite's memory). Each answer is still whole.
func TestCommandSearchStatementsFew(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const n = 40
	for k := 1; k <= n; k++ {
		p := process(fmt.Sprintf("p-%d", k), "", k)
		p.Pod, p.Argv = "runner-0", []string{"/bin/sh", "-c", fmt.Sprintf("i=%d; /bin/sleep 5", k)}
		if err := s.Write(ctx, store.Batch{Processes: []join.Process{p}}); err != nil {
			t.Fatal(err)
		}
		page, _, err := s.ListProcesses(ctx, store.ProcessFilter{Command: "/bin/sleep 5", Pod: "runner-0", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != k {
			t.Fatalf("%d commands match: %d processes found, want %d", k, len(page), k)
		}
	}
	// 1 to 8, 9 to 16, 17 to 32, 33 to 40: four shapes (40 before), each
	// kept as the rows' page, the list of its runs and the runs' walk in
	// page order; and one read of a listed run, whatever the shape.
	if got, want := s.lists.size(), 4*3+1; got != want {
		t.Errorf("%d list statements kept after searches matching 1 to %d commands, want %d", got, n, want)
	}
}

func TestPadIDs(t *testing.T) {
	for _, c := range []struct{ n, want int }{{0, 0}, {1, 8}, {8, 8}, {9, 16}, {200, 256}, {256, 256}} {
		ids := make([]any, c.n)
		for i := range ids {
			ids[i] = int64(i)
		}
		got := padIDs(ids)
		if len(got) != c.want {
			t.Errorf("%d ids padded to %d, want %d", c.n, len(got), c.want)
		}
		for i, id := range got {
			if want := int64(min(i, c.n-1)); id != want {
				t.Fatalf("%d ids: padded[%d] = %v, want %d", c.n, i, id, want)
			}
		}
	}
}
