package sqlite

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV5 builds a version-5 file, whose session_users and
// session_groups rows carry no audit ID, with alice's session and bob's
// (impersonating carol), then checks that Open copies every session's
// audit ID into its user and group rows, and that the process filters by
// user and group, which now read the ID there, find the same processes
// as before, and a session written after the upgrade too.
func TestMigrateFromV5(t *testing.T) {
	db, path := oldFile(t, 5, nil)
	bob := session("s-bob", "bob", 1)
	bob.ImpersonatedUser = &auditlog.UserInfo{Username: "carol", Groups: []string{"admins"}}
	// The rows as version 5's writer made them.
	for _, ss := range []join.Session{session("s-alice", "alice", 0), bob} {
		args, err := sessionArgs(&ss, base)
		if err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := db.QueryRow(upsertSessionSQL, args...).Scan(&id); err != nil {
			t.Fatal(err)
		}
		rr := nanos(ss.RequestReceivedTimestamp)
		users, groups := []string{ss.User.Username}, ss.User.Groups
		if imp := ss.ImpersonatedUser; imp != nil {
			users, groups = append(users, imp.Username), append(slices.Clip(groups), imp.Groups...)
		}
		for _, u := range users {
			if _, err := db.Exec(`INSERT INTO session_users (username, request_received, session_id) VALUES (?,?,?)`, u, rr, id); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range groups {
			if _, err := db.Exec(`INSERT INTO session_groups (grp, request_received, session_id) VALUES (?,?,?)`, g, rr, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	insertOldProcesses(t, db, process("a1", "s-alice", 1), process("b1", "s-bob", 2), process("b2", "s-bob", 3))
	db.Close()

	s := openMigrated(t, path)
	ctx := context.Background()
	var blank int
	if err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM session_users WHERE audit_id = '') +
		(SELECT count(*) FROM session_groups WHERE audit_id = '')`).Scan(&blank); err != nil || blank != 0 {
		t.Fatalf("%d side rows without an audit ID after migration (%v)", blank, err)
	}
	// A session stored after the upgrade, by the new writer.
	later := session("s-dave", "dave", 2)
	later.User.Groups = append(later.User.Groups, "admins")
	if err := s.Upsert(ctx, []join.Session{later}, []join.Process{process("d1", "s-dave", 4)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f    store.ProcessFilter
		want []string
	}{
		{store.ProcessFilter{User: "alice"}, []string{"a1"}},
		{store.ProcessFilter{User: "bob"}, []string{"b2", "b1"}},
		{store.ProcessFilter{User: "carol"}, []string{"b2", "b1"}}, // impersonated
		{store.ProcessFilter{User: "dave"}, []string{"d1"}},
		{store.ProcessFilter{User: "mallory"}, []string{}},
		{store.ProcessFilter{Group: "team-alice"}, []string{"a1"}},
		{store.ProcessFilter{Group: "admins"}, []string{"d1", "b2", "b1"}},
		{store.ProcessFilter{Group: "system:authenticated", Since: base.Add(2 * time.Second)}, []string{"d1", "b2", "b1"}},
	} {
		got, _, err := s.ListProcesses(ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		if ids := processIDs(got); !slices.Equal(ids, c.want) {
			t.Errorf("processes %+v = %v, want %v", c.f, ids, c.want)
		}
	}
}
