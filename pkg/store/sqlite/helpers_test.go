package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
	"github.com/rs/zerolog"
)

// base is the fixtures' reference time.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func openTest(t testing.TB) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "store.db"))
}

func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path, Config{}, zerolog.Nop())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ptr[T any](v T) *T { return &v }

// session returns a complete session received at base+minutes.
func session(id, user string, minutes int) join.Session {
	received := base.Add(time.Duration(minutes) * time.Minute)
	return join.Session{
		ExecRecord: auditlog.ExecRecord{
			AuditID: id,
			User: auditlog.UserInfo{Username: user, UID: "uid-" + user,
				Groups: []string{"system:authenticated", "team-" + user},
				Extra:  map[string][]string{"scopes": {"a", "b"}}},
			SourceIPs:                []string{"10.0.0.1"},
			UserAgent:                "kubectl/v1.33.0",
			Namespace:                "default",
			Pod:                      "web-0",
			Container:                "app",
			Command:                  []string{"sh", "-c", "echo " + id},
			Verb:                     "create",
			Subresource:              "exec",
			Code:                     101,
			Decision:                 "allow",
			RequestReceivedTimestamp: received,
			EndTimestamp:             received.Add(30 * time.Second),
			Stages:                   []string{"RequestReceived", "ResponseStarted", "ResponseComplete"},
		},
		UpdatedAt: base,
	}
}

// process returns a process of session auditID started at base+seconds.
func process(id, auditID string, seconds int) join.Process {
	return join.Process{
		Exec: capture.Exec{
			ProcessID:       id,
			ParentProcessID: "parent-" + id,
			PID:             100,
			PPID:            1,
			Filename:        "/bin/sh",
			Argv:            []string{"sh", "-c", "echo " + id},
			ContainerID:     "c0ffee",
			PodUID:          "pod-uid",
		},
		Namespace:   "default",
		Pod:         "web-0",
		Container:   "app",
		Start:       base.Add(time.Duration(seconds) * time.Second),
		AuditID:     auditID,
		Attribution: vocab.AttributionAuditID,
		Source:      vocab.SourceEnv,
		Flags:       []string{}, // as read back: see store.FillProcess
	}
}

func mustUpsert(t testing.TB, s *Store, sessions []join.Session, procs []join.Process) {
	t.Helper()
	if err := s.Upsert(context.Background(), sessions, procs); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
}

// allSessions pages through every session matching f.
func allSessions(t testing.TB, s *Store, f store.SessionFilter) []join.Session {
	t.Helper()
	var out []join.Session
	for {
		page, next, err := s.ListSessions(context.Background(), f)
		if err != nil {
			t.Fatalf("ListSessions(%+v): %v", f, err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		f.Cursor = next
	}
}

func sessionIDs(ss []join.Session) []string {
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.AuditID
	}
	return ids
}

func processIDs(ps []join.Process) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ProcessID
	}
	return ids
}

func fmtIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}
