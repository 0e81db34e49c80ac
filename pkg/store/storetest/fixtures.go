// Package storetest is the contract every store.Backend keeps: one suite
// that the SQLite store and the Elasticsearch store both run, and must
// answer identically.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// SessionProcessLimit is the store's Config.SessionProcessLimit that the
// open function passed to Run must set, so truncation can be checked.
const SessionProcessLimit = 5

// base is the fixtures' reference time; every fixture time is distinct, so
// no ordering depends on a backend's tie-break.
var base = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func at(seconds int) time.Time { return base.Add(time.Duration(seconds) * time.Second) }

func ptr[T any](v T) *T { return &v }

// session returns a complete session received at base+seconds.
func session(id, user string, seconds int) join.Session {
	return join.Session{
		ExecRecord: auditlog.ExecRecord{
			AuditID: id,
			User: auditlog.UserInfo{Username: user, UID: "uid-" + user,
				Groups: []string{"system:authenticated", "team-" + user},
				Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}}},
			SourceIPs:                []string{"10.0.0.1", "192.168.1.9"},
			UserAgent:                "kubectl/v1.35.0",
			Namespace:                "default",
			Pod:                      "web-0",
			Container:                "app",
			Command:                  []string{"sh", "-c", "echo " + id},
			Env:                      []string{"DEBUG=1"},
			Ports:                    []string{"8080"},
			Stdin:                    flag(true),
			TTY:                      flag(true),
			Verb:                     "create",
			Subresource:              "exec",
			Code:                     101,
			Decision:                 "allow",
			Reason:                   `RBAC: allowed by ClusterRoleBinding "admins"`,
			RequestURI:               "/api/v1/namespaces/default/pods/web-0/exec?command=sh&container=app",
			RequestReceivedTimestamp: at(seconds),
			EndTimestamp:             at(seconds + 30),
			Annotations:              map[string]string{"authorization.k8s.io/decision": "allow"},
			Stages:                   []string{"RequestReceived", "ResponseStarted", "ResponseComplete"},
		},
		SPOExecRequestUID: "spo-" + id,
		UpdatedAt:         base,
	}
}

// process returns a process of session auditID started at base+seconds.
func process(id, auditID string, seconds int) join.Process {
	return join.Process{
		Exec: capture.Exec{
			ProcessID:       id,
			ParentProcessID: "parent-" + id,
			PID:             uint32(100 + seconds),
			PPID:            1,
			UID:             1000,
			Filename:        "/bin/sh",
			Argv:            []string{"sh", "-c", "echo " + id},
			ContainerID:     "c0ffee",
			PodUID:          "pod-uid",
		},
		Namespace:   "default",
		Pod:         "web-0",
		Container:   "app",
		Start:       at(seconds),
		ExecTime:    at(seconds).Add(time.Millisecond),
		AuditID:     auditID,
		Attribution: vocab.AttributionAuditID,
		Confidence:  1,
		Source:      vocab.SourceEnv,
		Flags:       []string{}, // as read back: see store.FillProcess
	}
}

func alert(id, rule string, seconds int) store.Alert {
	return store.Alert{ID: id, Time: at(seconds), Rule: rule, Severity: "high", Message: "alert " + id,
		AuditID: "a-" + id, ProcessID: "p-" + id, Payload: json.RawMessage(`{"k":[1,2]}`)}
}

func write(t *testing.T, s store.Backend, b store.Batch) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// sameJSON compares by JSON encoding, which is what the API serves.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func allSessions(t *testing.T, s store.Backend, f store.SessionFilter) []string {
	t.Helper()
	var out []string
	for range 1000 {
		page, next, err := s.ListSessions(context.Background(), f)
		if err != nil {
			t.Fatalf("ListSessions(%+v): %v", f, err)
		}
		for _, ss := range page {
			out = append(out, ss.AuditID)
		}
		if next == "" {
			return out
		}
		f.Cursor = next
	}
	t.Fatal("ListSessions never ended")
	return nil
}

func allProcesses(t *testing.T, s store.Backend, f store.ProcessFilter) []string {
	t.Helper()
	var out []string
	for range 1000 {
		page, next, err := s.ListProcesses(context.Background(), f)
		if err != nil {
			t.Fatalf("ListProcesses(%+v): %v", f, err)
		}
		for _, p := range page {
			out = append(out, p.ProcessID)
		}
		if next == "" {
			return out
		}
		f.Cursor = next
	}
	t.Fatal("ListProcesses never ended")
	return nil
}

func allAlerts(t *testing.T, s store.Backend, f store.AlertFilter) []string {
	t.Helper()
	var out []string
	for range 1000 {
		page, next, err := s.ListAlerts(context.Background(), f)
		if err != nil {
			t.Fatalf("ListAlerts(%+v): %v", f, err)
		}
		for _, a := range page {
			out = append(out, a.ID)
		}
		if next == "" {
			return out
		}
		f.Cursor = next
	}
	t.Fatal("ListAlerts never ended")
	return nil
}

func ids(prefix string, nums ...int) []string {
	out := []string{}
	for _, n := range nums {
		out = append(out, fmt.Sprintf("%s%d", prefix, n))
	}
	return out
}

func sameIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if got == nil {
		got = []string{}
	}
	if want == nil {
		want = []string{}
	}
	sameJSON(t, what, got, want)
}

func flag(b bool) *bool { return &b }
