package sqlite

import (
	"context"
	"database/sql"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestMigrateFromV7 builds a version-7 file, whose process rows hold every
// field in a column of its own, then checks that Open moves the fields
// no query reads alone into detail: each process reads back as written,
// row ids (a page's cursor) are kept, the old columns are gone, the
// indexes are a new file's, the filters still find the processes, and a
// process written and exited after the upgrade reads back too.
func TestMigrateFromV7(t *testing.T) {
	db, path := oldFile(t, 7, nil)
	full := withArgv(process("a", "s", 1), "curl", "http://x")
	full.ClaimedAuditID, full.SPOExecRequestUID, full.SessionRootID = "s-claimed", "spo-1", "root-1"
	full.Candidates, full.Confidence, full.Flags = []string{"s", "s2"}, 0.5, []string{"env_removed"}
	full.PID, full.PPID, full.UID, full.ArgvTruncated = 1<<32-1, 7, 1000, true
	full.Attribution, full.Source = vocab.AttributionAmbiguous, vocab.SourceInherited
	full.ExecTime, full.Exit, full.ExitCode = base.Add(2*time.Second), base.Add(3*time.Second), ptr(137)
	bare := process("b", "", 2)
	bare.ParentProcessID, bare.PID, bare.PPID, bare.ContainerID, bare.PodUID, bare.Source = "", 0, 0, "", "", ""
	bare.Argv = nil
	var cmd int64
	if err := db.QueryRow(`INSERT INTO commands (argv, line, first_start, last_start) VALUES (?,?,?,?) RETURNING id`,
		`["curl","http://x"]`, "curl http://x", nanos(full.Start), nanos(full.Start)).Scan(&cmd); err != nil {
		t.Fatal(err)
	}
	row := "(" + placeholders(26) + ")"
	for _, w := range []struct {
		p       join.Process
		command any
	}{{full, cmd}, {bare, int64(0)}} {
		if _, err := db.Exec(upsertProcessHeadV7+row, oldProcessArgs(&w.p, w.command)...); err != nil {
			t.Fatal(err)
		}
	}
	ids := rowIDs(t, db)
	db.Close()

	s := openMigrated(t, path)
	ctx := context.Background()
	if got := rowIDs(t, s.r); !reflect.DeepEqual(got, ids) {
		t.Errorf("row ids %v after the upgrade, want %v", got, ids)
	}
	var old int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('processes')
		WHERE name IN ('pid', 'ppid', 'uid', 'parent_process_id', 'container_id', 'pod_uid', 'confidence',
			'candidates', 'source', 'flags', 'session_root_id', 'argv_truncated')`).Scan(&old); err != nil || old != 0 {
		t.Fatalf("%d old columns left, %v", old, err)
	}
	fresh := openTest(t)
	if got, want := indexSQL(t, s), indexSQL(t, fresh); !reflect.DeepEqual(got, want) {
		t.Errorf("indexes after the upgrade:\n%q\nwant a new file's:\n%q", got, want)
	}
	for _, want := range []join.Process{full, bare} {
		store.FillProcess(&want) // an empty list reads back empty, not nil
		if got := processByID(t, s, want.ProcessID); !reflect.DeepEqual(got, want) {
			t.Errorf("process %s after the upgrade:\n got %+v\nwant %+v", want.ProcessID, got, want)
		}
	}
	for f, want := range map[*store.ProcessFilter][]string{
		{Command: "curl"}:                         {"a"},
		{Attribution: vocab.AttributionAmbiguous}: {"a"},
		{Pod: "web-0", Namespace: "default"}:      {"b", "a"},
		{AuditID: "s"}:                            {"a"},
	} {
		if got := processIDs(allProcesses(t, s, *f)); !slices.Equal(got, want) {
			t.Errorf("filter %+v: %v, want %v", *f, got, want)
		}
	}
	later := process("c", "s", 5)
	mustUpsert(t, s, nil, []join.Process{later})
	later.Exit, later.ExitCode = base.Add(6*time.Second), ptr(0)
	if err := s.Write(ctx, store.Batch{Exits: []join.Process{later}}); err != nil {
		t.Fatal(err)
	}
	if got := processByID(t, s, "c"); !reflect.DeepEqual(got, later) {
		t.Errorf("a process written after the upgrade:\n got %+v\nwant %+v", got, later)
	}
}

func placeholders(n int) string {
	return string(slices.Repeat([]byte("?,"), n)[:2*n-1])
}

// rowIDs maps each process ID to its row id.
func rowIDs(t *testing.T, db *sql.DB) map[string]int64 {
	t.Helper()
	rows, err := db.Query(`SELECT process_id, id FROM processes`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ids := map[string]int64{}
	for rows.Next() {
		var k string
		var id int64
		if err := rows.Scan(&k, &id); err != nil {
			t.Fatal(err)
		}
		ids[k] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// indexSQL is the processes table's indexes, each as its SQL (an index a
// UNIQUE constraint makes has none: its column list, then).
func indexSQL(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.r.Query(`SELECT coalesce(m.sql, (SELECT group_concat(name) FROM pragma_index_info(m.name)))
		FROM sqlite_schema m WHERE m.type = 'index' AND m.tbl_name = 'processes' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			t.Fatal(err)
		}
		out = append(out, q)
	}
	return out
}

func processByID(t *testing.T, s *Store, id string) join.Process {
	t.Helper()
	for _, p := range allProcesses(t, s, store.ProcessFilter{}) {
		if p.ProcessID == id {
			return p
		}
	}
	t.Fatalf("process %s not stored", id)
	return join.Process{}
}
