package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
	"github.com/rs/zerolog"
)

func TestOpenSetsWALAndSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := openAt(t, path)
	ctx := context.Background()
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "1", "user_version": fmt.Sprint(schemaVersion)} {
		var got string
		if err := s.w.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
	mustUpsert(t, s, []join.Session{session("a", "alice", 0)}, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening finds the schema and the row.
	s2 := openAt(t, path)
	if _, err := s2.GetSession(ctx, "a"); err != nil {
		t.Fatalf("GetSession after reopen: %v", err)
	}
	if _, err := s2.r.ExecContext(ctx, "DELETE FROM sessions"); err == nil {
		t.Error("the read pool accepted a write")
	}
}

// TestOpenMapsTheFile: the writer reads the file through a mapping of
// MmapMiB (pages read in place, no copy in its cache); a reader maps
// ReadMmapMiB, none by default: SQLite unmaps a connection's mapping at
// every commit it did not make, and faulting the pages in again cost a
// reader more than copying them. A negative size maps nothing.
func TestOpenMapsTheFile(t *testing.T) {
	for _, tc := range []struct {
		cfg          Config
		writer, read int64
	}{
		{Config{}, 1 << 30, 0},
		{Config{MmapMiB: 64}, 64 << 20, 0},
		{Config{MmapMiB: -1, ReadMmapMiB: 32}, 0, 32 << 20},
	} {
		s, err := Open(filepath.Join(t.TempDir(), "s.db"), tc.cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]struct {
			db   *sql.DB
			want int64
		}{"writer": {s.w, tc.writer}, "reader": {s.r, tc.read}} {
			if got := pragmaInt(t, c.db, "mmap_size"); got != c.want {
				t.Errorf("%+v: the %s's mmap_size is %d, want %d", tc.cfg, name, got, c.want)
			}
		}
		s.Close()
	}
	// The writer keeps its cache; a reader's is small (negative: KiB).
	// TestOpenSetsWALAndSchema checks the readers still refuse writes.
	s := openTest(t)
	if w, r := pragmaInt(t, s.w, "cache_size"), pragmaInt(t, s.r, "cache_size"); w != -4096 || r != -1024 {
		t.Errorf("cache_size: the writer's %d, a reader's %d; want -4096 and -1024", w, r)
	}
}

func pragmaInt(t *testing.T, db *sql.DB, name string) int64 {
	t.Helper()
	var v int64
	if err := db.QueryRowContext(context.Background(), "PRAGMA "+name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpenRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		path string
		cfg  Config
	}{
		{"empty path", "", Config{}},
		{"query in path", filepath.Join(dir, "a.db?mode=ro"), Config{}},
		{"uri", "file:" + filepath.Join(dir, "a.db"), Config{}},
		{"negative pool", filepath.Join(dir, "b.db"), Config{ReadConns: -1}},
		{"limit above max", filepath.Join(dir, "c.db"), Config{DefaultLimit: 50, MaxLimit: 10}},
		{"missing dir", filepath.Join(dir, "no", "such", "d.db"), Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := Open(tc.path, tc.cfg, zerolog.Nop()); err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tc.path)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	ses := session("audit-1", "alice", 0)
	ses.ImpersonatedUser = &auditlog.UserInfo{Username: "bob", Groups: []string{"admins"}, Extra: map[string][]string{"k": {"v"}}}
	ses.Flags = []string{"audit_id_conflict"}
	ses.EndTimestamp = time.Time{}
	ses.Ports, ses.RequestURI, ses.SPOExecRequestUID = []string{"80"}, "/api/v1/namespaces/default/pods/web-0/exec", "spo-1"
	ses.Annotations = map[string]string{"authorization.k8s.io/decision": "allow"}
	ses.Conflicts = []auditlog.ExecRecord{session("audit-1", "mallory", 1).ExecRecord}
	ses.ProcessCount = 99 // computed by the store, so ignored
	root := process("p1", "audit-1", 5)
	root.ExitCode, root.Exit = ptr(0), base.Add(time.Minute)
	child := process("p2", "audit-1", 7)
	child.ParentProcessID, child.Attribution, child.Flags = "p1", vocab.AttributionInherited, []string{"env_removed"}
	child.ExecTime, child.ArgvTruncated, child.SPOExecRequestUID = base.Add(8*time.Second), true, "spo-1"
	child.PID, child.PPID, child.UID = 1<<32-1, 1<<31, 1000
	other := process("p3", "", 6)
	other.Attribution, other.Candidates, other.Confidence = vocab.AttributionAmbiguous, []string{"audit-1", "audit-2"}, 0.5
	rec := store.AuditRecord{AuditID: "audit-1", Stage: "ResponseStarted", StageTimestamp: base,
		Event: json.RawMessage(`{"auditID":"audit-1","stage":"ResponseStarted"}`)}
	if err := s.Write(ctx, store.Batch{Sessions: []join.Session{ses}, Processes: []join.Process{child, root, other},
		AuditRecords: []store.AuditRecord{rec}}); err != nil {
		t.Fatal(err)
	}

	d, err := s.GetSession(ctx, "audit-1")
	if err != nil {
		t.Fatal(err)
	}
	want := ses
	want.ProcessCount, want.FirstProcess, want.LastProcess = 2, root.Start, child.Start
	if !reflect.DeepEqual(d.Session, want) {
		t.Errorf("session:\n got %+v\nwant %+v", d.Session, want)
	}
	if !reflect.DeepEqual(d.Processes, []join.Process{root, child}) {
		t.Errorf("processes:\n got %+v\nwant %+v", d.Processes, []join.Process{root, child})
	}
	if len(d.AuditRecords) != 1 || string(d.AuditRecords[0].Event) != string(rec.Event) ||
		!d.AuditRecords[0].StageTimestamp.Equal(base) {
		t.Errorf("audit records = %+v", d.AuditRecords)
	}
	// The detail serializes flat, with the session's fields at the top.
	b, _ := json.Marshal(d)
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["auditID"] != "audit-1" || m["processCount"] != float64(2) || m["processes"] == nil {
		t.Errorf("JSON = %s", b)
	}

	// An upsert replaces the row whole, and the groups follow.
	ses.ImpersonatedUser, ses.User.Groups, ses.EndTimestamp = nil, []string{"new"}, base.Add(time.Hour)
	mustUpsert(t, s, []join.Session{ses}, nil)
	if got := sessionIDs(allSessions(t, s, store.SessionFilter{Group: "admins"})); len(got) != 0 {
		t.Errorf("stale group row still matches: %v", got)
	}
	if got := sessionIDs(allSessions(t, s, store.SessionFilter{Group: "new"})); !slices.Equal(got, []string{"audit-1"}) {
		t.Errorf("group new = %v", got)
	}
	d, _ = s.GetSession(ctx, "audit-1")
	if d.ImpersonatedUser != nil || !d.EndTimestamp.Equal(base.Add(time.Hour)) {
		t.Errorf("after update: %+v", d.Session)
	}

	ps, _, err := s.ListProcesses(ctx, store.ProcessFilter{Attribution: vocab.AttributionAmbiguous})
	if err != nil || len(ps) != 1 || !reflect.DeepEqual(ps[0], other) {
		t.Errorf("ambiguous processes = %+v, %v", ps, err)
	}

	if _, err := s.GetSession(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSession(nope) = %v, want ErrNotFound", err)
	}
	if _, _, err := s.ListSessions(ctx, store.SessionFilter{Cursor: "!!"}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	if _, _, err := s.ListProcesses(ctx, store.ProcessFilter{Cursor: "djEueA"}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	if err := s.Upsert(ctx, []join.Session{{}}, nil); err == nil {
		t.Error("a session without an audit ID was stored")
	}
}

func TestGetSessionTruncatesProcesses(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Config{SessionProcessLimit: 3}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ps []join.Process
	for i, id := range fmtIDs("p", 5) {
		ps = append(ps, process(id, "a", i))
	}
	mustUpsert(t, s, []join.Session{session("a", "alice", 0)}, ps)
	d, err := s.GetSession(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := processIDs(d.Processes); !d.ProcessesTruncated || !slices.Equal(got, []string{"p0", "p1", "p2"}) ||
		d.ProcessCount != 5 {
		t.Errorf("processes %v truncated=%v count=%d", got, d.ProcessesTruncated, d.ProcessCount)
	}
}

func TestAlerts(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var alerts []store.Alert
	for i, id := range fmtIDs("al", 5) {
		alerts = append(alerts, store.Alert{ID: id, Time: base.Add(time.Duration(i) * time.Minute), Rule: "shell",
			Severity: "high", Message: "shell in pod", AuditID: "a", Payload: json.RawMessage(`{"n":1}`)})
	}
	alerts[4].Rule = "other"
	if err := s.InsertAlerts(ctx, alerts); err != nil {
		t.Fatal(err)
	}
	dup := alerts[0]
	dup.Message = "changed"
	if err := s.InsertAlerts(ctx, []store.Alert{dup}); err != nil {
		t.Fatal(err)
	}
	var got []store.Alert
	f := store.AlertFilter{Rule: "shell", Limit: 2}
	for {
		page, next, err := s.ListAlerts(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		f.Cursor = next
	}
	if len(got) != 4 || got[0].ID != "al3" || got[3].ID != "al0" || got[3].Message != "shell in pod" ||
		string(got[0].Payload) != `{"n":1}` {
		t.Errorf("alerts = %+v", got)
	}
	page, _, err := s.ListAlerts(ctx, store.AlertFilter{Since: base.Add(4 * time.Minute)})
	if err != nil || len(page) != 1 || page[0].ID != "al4" {
		t.Errorf("since filter: %+v %v", page, err)
	}
}
