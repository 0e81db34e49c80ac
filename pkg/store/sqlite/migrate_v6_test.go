package sqlite

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV6 builds a version-6 file, whose process rows hold their
// argv's JSON and line, then checks that Open keeps each distinct argv
// once in commands, spanning its processes' starts, drops the two
// columns, and that every process reads its argv back, the command search
// finds the same processes, and a process written after the upgrade with
// a stored argv points to its row.
func TestMigrateFromV6(t *testing.T) {
	db, path := oldFile(t, 6, nil)
	insertOldProcesses(t, db,
		withArgv(process("a", "s", 1), "curl", "http://x"),
		withArgv(process("b", "s", 2), "cat", "/etc/shadow"),
		withArgv(process("c", "s", 3), "curl", "http://x"),
		withArgv(process("d", "s", 4)),
	)
	db.Close()

	s := openAt(t, path)
	ctx := context.Background()
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v", v, err)
	}
	var old int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('processes')
		WHERE name IN ('argv', 'argv_line')`).Scan(&old); err != nil || old != 0 {
		t.Fatalf("%d of argv and argv_line left, %v", old, err)
	}
	got := commandRows(t, s)
	want := map[string][2]int64{
		`["curl","http://x"]`:   {nanos(base.Add(time.Second)), nanos(base.Add(3 * time.Second))},
		`["cat","/etc/shadow"]`: {nanos(base.Add(2 * time.Second)), nanos(base.Add(2 * time.Second))},
	}
	if len(got) != len(want) || got[`["curl","http://x"]`] != want[`["curl","http://x"]`] ||
		got[`["cat","/etc/shadow"]`] != want[`["cat","/etc/shadow"]`] {
		t.Fatalf("commands %v, want %v", got, want)
	}
	for id, argv := range map[string][]string{"a": {"curl", "http://x"}, "b": {"cat", "/etc/shadow"}, "c": {"curl", "http://x"}, "d": nil} {
		if a := argvOf(t, s, id); !slices.Equal(a, argv) {
			t.Errorf("%s: argv %q, want %q", id, a, argv)
		}
	}
	if got := processIDs(allProcesses(t, s, store.ProcessFilter{Command: "curl http"})); !slices.Equal(got, []string{"c", "a"}) {
		t.Errorf("processes running curl: %v, want c a", got)
	}
	mustUpsert(t, s, nil, []join.Process{withArgv(process("e", "s", 5), "cat", "/etc/shadow")})
	if n := len(commandRows(t, s)); n != 2 {
		t.Errorf("%d commands rows after a stored argv ran again, want 2", n)
	}
	if got := processIDs(allProcesses(t, s, store.ProcessFilter{Command: "shadow"})); !slices.Equal(got, []string{"e", "b"}) {
		t.Errorf("processes reading /etc/shadow: %v, want e b", got)
	}
}
