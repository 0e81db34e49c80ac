package storetest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// Options adjust the contract to a backend.
type Options struct {
	// OpenForRetention, when set, opens the backend the Retention tests
	// use. A backend that retains by dropping whole time-partitioned
	// indices needs partitions finer than its default for the test's
	// fixtures, which lie seconds apart, with the cut 50 s past the last
	// old one: it must drop every partition that ended before the cut.
	OpenForRetention func(t *testing.T) store.Backend
}

// Run runs the contract against fresh backends from open, which must
// return an empty store with default page limits (DefaultLimit >= 100) and
// SessionProcessLimit set to the package's constant.
func Run(t *testing.T, open func(t *testing.T) store.Backend, opts ...Options) {
	var o Options
	for _, x := range opts {
		o = x
	}
	tests := []struct {
		name string
		fn   func(*testing.T, store.Backend)
	}{
		{"RoundTrip", testRoundTrip},
		{"UpsertReplaces", testUpsertReplaces},
		{"ExitsAlone", testExits},
		{"InvalidRows", testInvalidRows},
		{"SessionFilters", testSessionFilters},
		{"ProcessFilters", testProcessFilters},
		{"UnattributedFilter", testUnattributed},
		{"EvidenceIsStoredNotServed", testEvidence},
		{"PendingUntilRoundTrip", testPendingUntil},
		{"LateSessionFindsProcessesByUser", testLateSession},
		{"AlertFiltersAndDedupe", testAlerts},
		{"AlertResolutions", testAlertResolutions},
		{"Pagination", testPagination},
		{"PaginationUnderConcurrentInserts", testConcurrentPaging},
		{"NotFoundAndBadCursor", testErrors},
		{"SessionProcessLimit", testTruncation},
		{"Retention", testRetention},
		{"RetentionOfResolvedAlerts", testResolutionRetention},
		{"ClaimantsAreNotMembers", testClaimants},
		{"AuditIDReuseKeepsBoth", testAuditIDReuse},
		{"ReusedIDSessionsAreEachUsers", testReusedIDSessions},
		{"EmptyListsAreArrays", testEmptyLists},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "Retention") && o.OpenForRetention != nil {
				tc.fn(t, o.OpenForRetention(t))
				return
			}
			tc.fn(t, open(t))
		})
	}
}

func testRoundTrip(t *testing.T, s store.Backend) {
	ctx := context.Background()
	ss := session("s1", "alice", 0)
	ss.ImpersonatedUser = &auditlog.UserInfo{Username: "bob", UID: "u-b", Groups: []string{"ops"},
		Extra: map[string][]string{"scopes": {"x"}}}
	ss.Flags = []string{"audit_id_conflict"}
	other := session("s1", "mallory", 7).ExecRecord
	other.ImpersonatedUser, other.EndTimestamp = &auditlog.UserInfo{Username: "root"}, time.Time{}
	ss.Conflicts = []auditlog.ExecRecord{other}
	p1, p2 := process("p1", "s1", 5), process("p2", "s1", 3)
	p1.Exit, p1.ExitCode = at(9), ptr(0)
	p2.Candidates, p2.Flags, p2.Confidence = []string{"s1", "s9"}, []string{"late"}, 0.25
	p2.ClaimedAuditID, p2.SessionRootID, p2.Attribution = "s9", "p1", vocab.AttributionAmbiguous
	p2.ArgvTruncated, p2.SPOExecRequestUID, p2.Source = true, "spo-1", vocab.SourceInherited
	recs := []store.AuditRecord{
		{AuditID: "s1", Stage: "ResponseStarted", StageTimestamp: at(1), Event: []byte(`{"stage":"ResponseStarted","auditID":"s1"}`)},
		{AuditID: "s1", Stage: "RequestReceived", StageTimestamp: at(0), Event: []byte(`{"stage": "RequestReceived", "x": 1.50}`)},
	}
	write(t, s, store.Batch{Sessions: []join.Session{ss}, Processes: []join.Process{p1, p2}, AuditRecords: recs})

	d, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	want := ss
	want.FirstProcess, want.LastProcess, want.ProcessCount = at(3), at(5), 2
	sameJSON(t, "session", d.Session, want)
	sameJSON(t, "processes oldest first", d.Processes, []join.Process{p2, p1})
	sameJSON(t, "audit records by time", d.AuditRecords, []store.AuditRecord{recs[1], recs[0]})
	if string(d.AuditRecords[0].Event) != string(recs[1].Event) {
		t.Fatalf("audit event not kept byte for byte: %s", d.AuditRecords[0].Event)
	}
	if d.ProcessesTruncated {
		t.Fatal("truncated with 2 processes")
	}
	list, _, err := s.ListSessions(ctx, store.SessionFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListSessions = %v, %v", list, err)
	}
	sameJSON(t, "listed session", list[0], want)

	// A session without processes has zero aggregates and an empty list.
	write(t, s, store.Batch{Sessions: []join.Session{session("s2", "carol", 100)}})
	d, err = s.GetSession(ctx, "s2")
	if err != nil {
		t.Fatal(err)
	}
	if d.ProcessCount != 0 || !d.FirstProcess.IsZero() || d.Processes == nil || len(d.Processes) != 0 {
		t.Fatalf("empty session: count %d first %v processes %v", d.ProcessCount, d.FirstProcess, d.Processes)
	}
}

func testUpsertReplaces(t *testing.T, s store.Backend) {
	ctx := context.Background()
	write(t, s, store.Batch{Sessions: []join.Session{session("s1", "alice", 0)}})
	bare := join.Session{ExecRecord: auditlog.ExecRecord{AuditID: "s1", User: auditlog.UserInfo{Username: "dave"},
		RequestReceivedTimestamp: at(1), Stages: []string{}}, UpdatedAt: base}
	write(t, s, store.Batch{Sessions: []join.Session{bare}})
	d, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "replaced session", d.Session, bare)
	sameIDs(t, "old user gone", allSessions(t, s, store.SessionFilter{User: "alice"}), nil)
	sameIDs(t, "new user", allSessions(t, s, store.SessionFilter{User: "dave"}), []string{"s1"})

	// Within one batch the last row with a key wins.
	p := process("p1", "s1", 2)
	p2 := p
	p2.Argv = []string{"bash"}
	write(t, s, store.Batch{Processes: []join.Process{p, p2}})
	got, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "last row wins", got, []join.Process{p2})

	// An unset UpdatedAt is stamped.
	write(t, s, store.Batch{Sessions: []join.Session{{ExecRecord: auditlog.ExecRecord{AuditID: "s3",
		RequestReceivedTimestamp: at(5)}}}})
	if d, err := s.GetSession(ctx, "s3"); err != nil || d.UpdatedAt.IsZero() {
		t.Fatalf("UpdatedAt = %v, %v", d.UpdatedAt, err)
	}
}

func testInvalidRows(t *testing.T, s store.Backend) {
	ctx := context.Background()
	if err := s.Write(ctx, store.Batch{}); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	for _, b := range []store.Batch{
		{Sessions: []join.Session{{ExecRecord: auditlog.ExecRecord{User: auditlog.UserInfo{Username: "x"}}}}},
		{Processes: []join.Process{{Exec: capture.Exec{PID: 1}}}},
		{AuditRecords: []store.AuditRecord{{AuditID: "a"}}},
		{Alerts: []store.Alert{{Rule: "r"}}},
	} {
		if err := s.Write(ctx, b); err == nil {
			t.Errorf("Write(%+v) accepted a row without its key", b)
		}
	}
}

func testSessionFilters(t *testing.T, s store.Backend) {
	s1, s2, s3, s4 := session("s1", "alice", 10), session("s2", "bob", 20), session("s3", "alice", 30), session("s4", "eve", 40)
	s2.Namespace, s2.Pod, s2.Container = "kube-system", "dns-0", "dns"
	s3.Command = []string{"cat", "/etc/*passwd?"}
	s4.ImpersonatedUser = &auditlog.UserInfo{Username: "alice", Groups: []string{"admins"}}
	write(t, s, store.Batch{Sessions: []join.Session{s1, s2, s3, s4}})
	cases := []struct {
		f    store.SessionFilter
		want []string
	}{
		{store.SessionFilter{}, []string{"s4", "s3", "s2", "s1"}},
		{store.SessionFilter{User: "alice"}, []string{"s4", "s3", "s1"}},
		{store.SessionFilter{User: "eve"}, []string{"s4"}},
		{store.SessionFilter{Group: "admins"}, []string{"s4"}},
		{store.SessionFilter{Group: "team-alice"}, []string{"s3", "s1"}},
		{store.SessionFilter{User: "alice", Group: "team-alice"}, []string{"s3", "s1"}},
		{store.SessionFilter{Namespace: "kube-system"}, []string{"s2"}},
		{store.SessionFilter{Pod: "dns-0"}, []string{"s2"}},
		{store.SessionFilter{Container: "app"}, []string{"s4", "s3", "s1"}},
		{store.SessionFilter{Since: at(20), Until: at(40)}, []string{"s3", "s2"}},
		{store.SessionFilter{Since: at(20).Add(time.Nanosecond)}, []string{"s4", "s3"}},
		{store.SessionFilter{Command: "*passwd?"}, []string{"s3"}},
		{store.SessionFilter{Command: "c/*pa"}, []string{"s3"}},
		{store.SessionFilter{Command: "PASSWD"}, nil},
		{store.SessionFilter{Command: "?"}, []string{"s3"}},
		{store.SessionFilter{Command: `\`}, nil},
		{store.SessionFilter{Command: "echo s"}, []string{"s4", "s2", "s1"}},
		{store.SessionFilter{User: "nobody"}, nil},
	}
	for _, c := range cases {
		sameIDs(t, fmt.Sprintf("%+v", c.f), allSessions(t, s, c.f), c.want)
	}
}

func testProcessFilters(t *testing.T, s store.Backend) {
	s1, s2 := session("s1", "alice", 0), session("s2", "bob", 1)
	s2.ImpersonatedUser = &auditlog.UserInfo{Username: "root", Groups: []string{"wheel"}}
	p1, p2, p3, p4 := process("p1", "s1", 10), process("p2", "s2", 20), process("p3", "s2", 30), process("p4", "", 40)
	p3.Namespace, p3.Pod, p3.Container, p3.Argv = "prod", "db-0", "pg", []string{"psql", "-c", `SELECT '*'`}
	p4.Attribution = vocab.AttributionHeuristic
	write(t, s, store.Batch{Sessions: []join.Session{s1, s2}, Processes: []join.Process{p1, p2, p3, p4}})
	cases := []struct {
		f    store.ProcessFilter
		want []string
	}{
		{store.ProcessFilter{}, []string{"p4", "p3", "p2", "p1"}},
		{store.ProcessFilter{User: "alice"}, []string{"p1"}},
		{store.ProcessFilter{User: "root"}, []string{"p3", "p2"}},
		{store.ProcessFilter{Group: "wheel"}, []string{"p3", "p2"}},
		{store.ProcessFilter{User: "bob", Group: "team-bob"}, []string{"p3", "p2"}},
		{store.ProcessFilter{User: "alice", Group: "wheel"}, nil},
		{store.ProcessFilter{User: "nobody"}, nil},
		{store.ProcessFilter{Namespace: "prod"}, []string{"p3"}},
		{store.ProcessFilter{Pod: "db-0"}, []string{"p3"}},
		{store.ProcessFilter{Container: "app"}, []string{"p4", "p2", "p1"}},
		{store.ProcessFilter{AuditID: "s2"}, []string{"p3", "p2"}},
		{store.ProcessFilter{Attribution: vocab.AttributionHeuristic}, []string{"p4"}},
		{store.ProcessFilter{Command: `'*'`}, []string{"p3"}},
		{store.ProcessFilter{Command: "*"}, []string{"p3"}},
		{store.ProcessFilter{Command: "echo p"}, []string{"p4", "p2", "p1"}},
		{store.ProcessFilter{Since: at(20), Until: at(30)}, []string{"p2"}},
	}
	for _, c := range cases {
		sameIDs(t, fmt.Sprintf("%+v", c.f), allProcesses(t, s, c.f), c.want)
	}
}

func testLateSession(t *testing.T, s store.Backend) {
	write(t, s, store.Batch{Processes: []join.Process{process("p1", "late", 5)}})
	sameIDs(t, "before the session", allProcesses(t, s, store.ProcessFilter{User: "alice"}), nil)
	write(t, s, store.Batch{Sessions: []join.Session{session("late", "alice", 0)}})
	sameIDs(t, "after the session", allProcesses(t, s, store.ProcessFilter{User: "alice"}), []string{"p1"})
	d, err := s.GetSession(context.Background(), "late")
	if err != nil || d.ProcessCount != 1 || len(d.Processes) != 1 {
		t.Fatalf("late session detail: %+v, %v", d, err)
	}
}

func testAlerts(t *testing.T, s store.Backend) {
	a1, a2, a3 := alert("a1", "shell", 1), alert("a2", "shell", 2), alert("a3", "curl", 3)
	a3.Severity = "low"
	write(t, s, store.Batch{Alerts: []store.Alert{a1, a2, a3}})
	dup := a1
	dup.Message = "a second delivery"
	write(t, s, store.Batch{Alerts: []store.Alert{dup}})
	write(t, s, store.Batch{Alerts: []store.Alert{dup, dup}})
	got, _, err := s.ListAlerts(context.Background(), store.AlertFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "alerts newest first, inserted once", got, []store.Alert{a3, a2, a1})
	cases := []struct {
		f    store.AlertFilter
		want []string
	}{
		{store.AlertFilter{Rule: "shell"}, []string{"a2", "a1"}},
		{store.AlertFilter{Severity: "low"}, []string{"a3"}},
		{store.AlertFilter{AuditID: "a-a2"}, []string{"a2"}},
		{store.AlertFilter{ProcessID: "p-a1"}, []string{"a1"}},
		{store.AlertFilter{Since: at(2), Until: at(3)}, []string{"a2"}},
	}
	for _, c := range cases {
		sameIDs(t, fmt.Sprintf("%+v", c.f), allAlerts(t, s, c.f), c.want)
	}
}

func testPagination(t *testing.T, s store.Backend) {
	ctx := context.Background()
	var b store.Batch
	for i := range 7 {
		b.Sessions = append(b.Sessions, session(fmt.Sprintf("s%d", i), "alice", i))
		b.Processes = append(b.Processes, process(fmt.Sprintf("p%d", i), "s0", i))
		b.Alerts = append(b.Alerts, alert(fmt.Sprintf("a%d", i), "r", i))
	}
	write(t, s, b)
	page, next, err := s.ListSessions(ctx, store.SessionFilter{Limit: 3})
	if err != nil || len(page) != 3 || next == "" {
		t.Fatalf("first page: %d rows, next %q, %v", len(page), next, err)
	}
	want := ids("s", 6, 5, 4, 3, 2, 1, 0)
	sameIDs(t, "sessions by 3", allSessions(t, s, store.SessionFilter{Limit: 3, User: "alice"}), want)
	sameIDs(t, "sessions by 7", allSessions(t, s, store.SessionFilter{Limit: 7}), want)
	sameIDs(t, "processes by 2", allProcesses(t, s, store.ProcessFilter{Limit: 2}), ids("p", 6, 5, 4, 3, 2, 1, 0))
	sameIDs(t, "alerts by 4", allAlerts(t, s, store.AlertFilter{Limit: 4}), ids("a", 6, 5, 4, 3, 2, 1, 0))
	if _, next, _ := s.ListSessions(ctx, store.SessionFilter{Limit: 7}); next != "" {
		t.Fatalf("exact last page has next %q", next)
	}
}

func testConcurrentPaging(t *testing.T, s store.Backend) {
	ctx := context.Background()
	var b store.Batch
	for i := range 20 {
		b.Sessions = append(b.Sessions, session(fmt.Sprintf("s%02d", i), "alice", i))
	}
	write(t, s, b)
	var want []string
	for i := 19; i >= 0; i-- {
		want = append(want, fmt.Sprintf("s%02d", i))
	}
	f := store.SessionFilter{Limit: 3}
	var got []string
	var wg sync.WaitGroup
	for page := 0; ; page++ {
		rows, next, err := s.ListSessions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			got = append(got, r.AuditID)
		}
		// Newer sessions, and an older one, land between pages.
		wg.Add(1)
		go func(page int) {
			defer wg.Done()
			_ = s.Write(ctx, store.Batch{Sessions: []join.Session{
				session(fmt.Sprintf("new%02d", page), "alice", 1000+page),
			}})
		}(page)
		wg.Wait()
		if next == "" {
			break
		}
		f.Cursor = next
	}
	sameIDs(t, "pages under inserts", got, want)
}

func testErrors(t *testing.T, s store.Backend) {
	ctx := context.Background()
	write(t, s, store.Batch{Sessions: []join.Session{session("s1", "alice", 0)}})
	for _, id := range []string{"nope", ""} {
		if _, err := s.GetSession(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetSession(%q) = %v, want ErrNotFound", id, err)
		}
	}
	bad := []string{"!!!", "djEuMS4y" + "x", base64.RawURLEncoding.EncodeToString([]byte("v9.1.2")),
		base64.RawURLEncoding.EncodeToString([]byte("garbage"))}
	for _, c := range bad {
		if _, _, err := s.ListSessions(ctx, store.SessionFilter{Cursor: c}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("ListSessions(cursor %q) = %v, want ErrInvalidCursor", c, err)
		}
		if _, _, err := s.ListProcesses(ctx, store.ProcessFilter{Cursor: c}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("ListProcesses(cursor %q) = %v, want ErrInvalidCursor", c, err)
		}
		if _, _, err := s.ListAlerts(ctx, store.AlertFilter{Cursor: c}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("ListAlerts(cursor %q) = %v, want ErrInvalidCursor", c, err)
		}
	}
}

func testTruncation(t *testing.T, s store.Backend) {
	var b store.Batch
	b.Sessions = []join.Session{session("s1", "alice", 0)}
	for i := range SessionProcessLimit + 2 {
		b.Processes = append(b.Processes, process(fmt.Sprintf("p%d", i), "s1", 100-i))
	}
	write(t, s, b)
	d, err := s.GetSession(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !d.ProcessesTruncated || d.ProcessCount != SessionProcessLimit+2 {
		t.Fatalf("truncated %v, count %d", d.ProcessesTruncated, d.ProcessCount)
	}
	var got []string
	for _, p := range d.Processes {
		got = append(got, p.ProcessID)
	}
	sameIDs(t, "oldest processes kept", got, ids("p", 6, 5, 4, 3, 2))
}
