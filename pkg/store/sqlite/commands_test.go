package sqlite

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// withArgv is process p running argv.
func withArgv(p join.Process, argv ...string) join.Process {
	p.Argv = argv
	return p
}

// commandRows reads the commands table: each argv's JSON and its span.
func commandRows(t *testing.T, s *Store) map[string][2]int64 {
	t.Helper()
	rows, err := s.r.Query(`SELECT argv, first_start, last_start FROM commands`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string][2]int64{}
	for rows.Next() {
		var argv string
		var first, last int64
		if err := rows.Scan(&argv, &first, &last); err != nil {
			t.Fatal(err)
		}
		m[argv] = [2]int64{first, last}
	}
	return m
}

// argvOf reads back process id's argv through the listing.
func argvOf(t *testing.T, s *Store, id string) []string {
	t.Helper()
	return processByID(t, s, id).Argv
}

func allProcesses(t *testing.T, s *Store, f store.ProcessFilter) []join.Process {
	t.Helper()
	var all []join.Process
	f.Limit = 2
	for {
		page, next, err := s.ListProcesses(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		f.Cursor = next
	}
}

// TestCommandsStoredOnce: an argv is one commands row however many
// processes ran it, over several transactions, spanning their starts (a
// process stored later with an earlier start widens it); an empty argv is
// none; every process reads its own argv back.
func TestCommandsStoredOnce(t *testing.T) {
	s := openTest(t)
	mustUpsert(t, s, nil, []join.Process{
		withArgv(process("p1", "s", 10), "curl", "-s", "http://x"),
		withArgv(process("p2", "s", 20), "curl", "-s", "http://x"),
		withArgv(process("p3", "s", 30)),
	})
	curl := `["curl","-s","http://x"]`
	if got, want := commandRows(t, s)[curl], [2]int64{nanos(base.Add(10 * time.Second)), nanos(base.Add(20 * time.Second))}; got != want {
		t.Fatalf("span after one transaction %v, want %v", got, want)
	}
	mustUpsert(t, s, nil, []join.Process{withArgv(process("p4", "s", 40), "curl", "-s", "http://x")})
	mustUpsert(t, s, nil, []join.Process{withArgv(process("p5", "s", 5), "curl", "-s", "http://x")})
	got := commandRows(t, s)
	want := map[string][2]int64{`["curl","-s","http://x"]`: {nanos(base.Add(5 * time.Second)), nanos(base.Add(40 * time.Second))}}
	if len(got) != 1 || got[`["curl","-s","http://x"]`] != want[`["curl","-s","http://x"]`] {
		t.Fatalf("commands %v, want %v", got, want)
	}
	for _, id := range []string{"p1", "p2", "p4", "p5"} {
		if a := argvOf(t, s, id); !slices.Equal(a, []string{"curl", "-s", "http://x"}) {
			t.Errorf("%s: argv %q", id, a)
		}
	}
	if a := argvOf(t, s, "p3"); len(a) != 0 {
		t.Errorf("p3: argv %q, want none", a)
	}
	// The widened span is what the search walks: p5 is found.
	found := processIDs(allProcesses(t, s, store.ProcessFilter{Command: "curl -s"}))
	if !slices.Equal(found, []string{"p4", "p2", "p1", "p5"}) {
		t.Errorf("processes running curl -s: %v, want p4 p2 p1 p5", found)
	}
}

// TestCommandCacheSurvivesRollback: a transaction that inserted an argv
// and rolled back leaves no row, so the writer must not remember its id;
// the next process with that argv reads it back.
func TestCommandCacheSurvivesRollback(t *testing.T) {
	s := openTest(t)
	bad := process("", "s", 2) // an empty process ID fails the batch after p1's argv was inserted
	err := s.Upsert(context.Background(), nil, []join.Process{withArgv(process("p1", "s", 1), "wget", "x"), bad})
	if err == nil {
		t.Fatal("a batch with an empty process ID was stored")
	}
	if n := len(commandRows(t, s)); n != 0 {
		t.Fatalf("%d commands rows after the rollback", n)
	}
	// Positive control: another argv first takes the id the rolled back
	// one had, so a cached stale id would read as that argv.
	mustUpsert(t, s, nil, []join.Process{withArgv(process("p0", "s", 0), "id")})
	mustUpsert(t, s, nil, []join.Process{withArgv(process("p1", "s", 1), "wget", "x")})
	if a := argvOf(t, s, "p1"); !slices.Equal(a, []string{"wget", "x"}) {
		t.Fatalf("p1 after the rollback: argv %q, want wget x", a)
	}
}

// TestRetentionDeletesCommands: retention deletes the commands rows no
// process points to any more and keeps the one a running process does;
// an argv written after it gets a row again, not the deleted id.
func TestRetentionDeletesCommands(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	old := withArgv(process("old", "s", 1), "nc", "-l")
	old.Exit = base.Add(2 * time.Second)
	running := withArgv(process("running", "s", 3), "sleep", "infinity")
	mustUpsert(t, s, nil, []join.Process{old, running})
	if _, err := s.DeleteOlderThan(ctx, base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got := commandRows(t, s)
	if _, ok := got[`["nc","-l"]`]; ok || len(got) != 1 {
		t.Fatalf("commands after retention: %v, want sleep infinity's alone", got)
	}
	// A writer still holding nc -l's id would point the next process at
	// no row: its argv would read back empty.
	mustUpsert(t, s, nil, []join.Process{withArgv(process("again", "s", 5), "nc", "-l")})
	if a := argvOf(t, s, "again"); !slices.Equal(a, []string{"nc", "-l"}) {
		t.Fatalf("a process after retention: argv %q, want nc -l", a)
	}
	if a := argvOf(t, s, "running"); !slices.Equal(a, []string{"sleep", "infinity"}) {
		t.Fatalf("the running process: argv %q", a)
	}
}

// TestCommandSearch: a substring finds exactly the processes whose line
// holds it, in page order; none ran it: an empty page at once, and a bad
// cursor is still refused.
func TestCommandSearch(t *testing.T) {
	s := openTest(t)
	var ps []join.Process
	for i := range 12 {
		argv := []string{"cat", "/etc/hosts"}
		if i%3 == 0 {
			argv = []string{"curl", "http://evil/" + string(rune('a'+i))}
		}
		ps = append(ps, withArgv(process(fmtIDs("p", 12)[i], "s", i), argv...))
	}
	mustUpsert(t, s, nil, ps)
	got := processIDs(allProcesses(t, s, store.ProcessFilter{Command: "http://evil/"}))
	if want := []string{"p9", "p6", "p3", "p0"}; !slices.Equal(got, want) {
		t.Errorf("curl: %v, want %v", got, want)
	}
	if got := processIDs(allProcesses(t, s, store.ProcessFilter{Command: "evil/g"})); !slices.Equal(got, []string{"p6"}) {
		t.Errorf("one URL: %v, want p6", got)
	}
	page, next, err := s.ListProcesses(context.Background(), store.ProcessFilter{Command: "rm -rf"})
	if err != nil || page == nil || len(page) != 0 || next != "" { // nil would be JSON null, not []
		t.Errorf("a command nobody ran: %d processes, cursor %q, %v", len(page), next, err)
	}
	if _, _, err := s.ListProcesses(context.Background(), store.ProcessFilter{Command: "rm -rf", Cursor: "!"}); err == nil {
		t.Error("a bad cursor was taken when nothing matched")
	}
}

// TestArgvKey: argvs that join alike, with NULs or empty tokens, are
// different keys, so their processes keep their own argv.
func TestArgvKey(t *testing.T) {
	argvs := [][]string{{"a\x00b"}, {"a", "b"}, {"", "a", "b"}, {"a", "", "b"}, {"ab"}, {"a\x01b"}, {}, {""}, {"", ""}}
	seen := map[string][]string{}
	for _, a := range argvs {
		k := argvKey(a)
		if prev, ok := seen[k]; ok {
			t.Errorf("argvs %q and %q share a key", prev, a)
		}
		seen[k] = a
	}
	s := openTest(t)
	var ps []join.Process
	for i, a := range argvs[:6] {
		ps = append(ps, withArgv(process(fmtIDs("p", 6)[i], "s", i), a...))
	}
	mustUpsert(t, s, nil, ps)
	for i, a := range argvs[:6] {
		if got := argvOf(t, s, fmtIDs("p", 6)[i]); !slices.Equal(got, a) {
			t.Errorf("process %d: argv %q, want %q", i, got, a)
		}
	}
}

// TestMigrateFromV6 builds a version-6 file, whose process rows hold their
// argv's JSON and line, then checks that Open keeps each distinct argv
// once in commands, spanning its processes' starts, drops the two
// columns, and that every process reads its argv back, the command search
// finds the same processes, and a process written after the upgrade with
// a stored argv points to its row; a session's command is spanned too.
func TestMigrateFromV6(t *testing.T) {
	db, path := oldFile(t, 6, nil)
	ss := session("s-old", "alice", 0)
	ss.Command = []string{"sh", "-c", "id"}
	args, err := sessionArgs(&ss, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(upsertSessionSQL, args...); err != nil {
		t.Fatal(err)
	}
	insertOldProcesses(t, db,
		withArgv(process("a", "s", 1), "curl", "http://x"),
		withArgv(process("b", "s", 2), "cat", "/etc/shadow"),
		withArgv(process("c", "s", 3), "curl", "http://x"),
		withArgv(process("d", "s", 4)),
	)
	db.Close()

	s := openMigrated(t, path)
	ctx := context.Background()
	var old int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('processes')
		WHERE name IN ('argv', 'argv_line')`).Scan(&old); err != nil || old != 0 {
		t.Fatalf("%d of argv and argv_line left, %v", old, err)
	}
	got := commandRows(t, s)
	want := map[string][2]int64{
		`["curl","http://x"]`:   {nanos(base.Add(time.Second)), nanos(base.Add(3 * time.Second))},
		`["cat","/etc/shadow"]`: {nanos(base.Add(2 * time.Second)), nanos(base.Add(2 * time.Second))},
		`["sh","-c","id"]`:      {nanos(base), nanos(base)},
	}
	if len(got) != len(want) {
		t.Fatalf("commands %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("commands %v, want %v", got, want)
		}
	}
	if got := sessionIDsOf(t, s, store.SessionFilter{Command: "sh -c id"}); !slices.Equal(got, []string{"s-old"}) {
		t.Errorf("sessions asking for sh -c id: %v, want s-old", got)
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
	if n := len(commandRows(t, s)); n != 3 {
		t.Errorf("%d commands rows after a stored argv ran again, want 3", n)
	}
	if got := processIDs(allProcesses(t, s, store.ProcessFilter{Command: "shadow"})); !slices.Equal(got, []string{"e", "b"}) {
		t.Errorf("processes reading /etc/shadow: %v, want e b", got)
	}
}

func sessionIDsOf(t *testing.T, s *Store, f store.SessionFilter) []string {
	t.Helper()
	page, _, err := s.ListSessions(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if page == nil {
		t.Fatal("a nil page (JSON null)")
	}
	return sessionIDs(page)
}

// TestSessionCommandSearch: a session's command is found by a substring,
// whether or not a process ran it, and a session whose command no process
// ran keeps it through retention while the session stays (a running
// process keeps it); a substring nobody asked for is an empty page.
func TestSessionCommandSearch(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	a := session("s-a", "alice", 0) // asks for sh -c echo s-a, which no process runs
	a.Command = []string{"sh", "-c", "cat /etc/shadow"}
	b := session("s-b", "bob", 5)
	running := withArgv(process("p", "s-a", 30), "sleep", "1d")
	mustUpsert(t, s, []join.Session{a, b}, []join.Process{running})
	if got := sessionIDsOf(t, s, store.SessionFilter{Command: "shadow"}); !slices.Equal(got, []string{"s-a"}) {
		t.Fatalf("sessions asking for shadow: %v, want s-a", got)
	}
	if got := sessionIDsOf(t, s, store.SessionFilter{Command: "echo s-"}); !slices.Equal(got, []string{"s-b"}) {
		t.Fatalf("sessions asking for echo: %v, want s-b", got)
	}
	if got := sessionIDsOf(t, s, store.SessionFilter{Command: "rm -rf"}); len(got) != 0 {
		t.Fatalf("sessions asking for rm -rf: %v", got)
	}
	// Retention past both sessions' end: s-a stays (its process runs), and
	// with it the command only it asked for; s-b goes.
	if _, err := s.DeleteOlderThan(ctx, base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := sessionIDsOf(t, s, store.SessionFilter{Command: "shadow"}); !slices.Equal(got, []string{"s-a"}) {
		t.Fatalf("after retention, sessions asking for shadow: %v, want s-a", got)
	}
	if _, ok := commandRows(t, s)[`["sh","-c","echo s-b"]`]; ok {
		t.Fatal("the command of a deleted session was kept")
	}
}

// TestArgvsServedAsCopies: argvs come from the readers' cache once read,
// and each answer's are its own; a caller that edits one does not change
// what the next reader gets.
func TestArgvsServedAsCopies(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	writeExitedLines(t, s, "cat /etc/shadow", "id -u", "cat /etc/shadow")
	argvs := func() map[string]string {
		page, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
		if err != nil || len(page) != 3 {
			t.Fatalf("listing: %d processes, %v; want 3", len(page), err)
		}
		m := map[string]string{}
		for _, p := range page {
			m[p.ProcessID] = strings.Join(p.Argv, " ")
			if len(p.Argv) > 0 {
				p.Argv[0] = "edited" // a caller's edit, in the answer it got
			}
		}
		return m
	}
	want := map[string]string{"p-0": "cat /etc/shadow", "p-1": "id -u", "p-2": "cat /etc/shadow"}
	for i := range 3 { // read, then from the cache, which an edit must not reach
		if got := argvs(); !maps.Equal(got, want) {
			t.Fatalf("read %d: argvs %v, want %v", i, got, want)
		}
		if i == 0 {
			// The rows changed under the cache (no writer does): what the
			// next reads give can only have come from it.
			if _, err := s.w.Exec(`UPDATE commands SET argv = json_array('changed', id)`); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(s.argvs.m) != 2 {
		t.Fatalf("%d argvs cached, want the two lines", len(s.argvs.m))
	}
}
