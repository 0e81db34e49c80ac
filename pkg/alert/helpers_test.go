package alert

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// session returns a plain, unremarkable exec session.
func session() *join.Session {
	return &join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID:   "5b5e2e4c-0000-4000-8000-000000000001",
		User:      auditlog.UserInfo{Username: "alice@example.com", Groups: []string{"system:authenticated", "dev"}},
		Namespace: "shop",
		Pod:       "web-0",
		Container: "app",
		Command:   []string{"ls", "-l"},
		Verb:      "create",
		Code:      101,
	}}
}

// process returns a process attributed to session().
func process() *join.Process {
	return &join.Process{
		Exec: capture.Exec{
			ProcessID: "1234-1700000000000000000",
			PID:       1234,
			PPID:      1,
			Filename:  "/bin/ls",
			Argv:      []string{"ls", "-l"},
		},
		Namespace:   "shop",
		Pod:         "web-0",
		Container:   "app",
		Start:       t0,
		AuditID:     "5b5e2e4c-0000-4000-8000-000000000001",
		Attribution: vocab.AttributionAuditID,
		Source:      vocab.SourceEnv,
	}
}

// claimantInput is process() carrying session()'s ID without being
// attributed to it, with session() as the claimed session.
func claimantInput() Input {
	s, p := session(), process()
	p.AuditID, p.ClaimedAuditID, p.Attribution = "", s.AuditID, ""
	p.ContainerID = "e9ca6c735a09"
	return Input{Claimed: s, Process: p}
}

func newTestEngine(t testing.TB, rules []Rule, reg prometheus.Registerer, opts ...EngineOption) *Engine {
	t.Helper()
	e, err := NewEngine(rules, zerolog.Nop(), reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ruleNames(alerts []store.Alert) []string {
	var n []string
	for _, a := range alerts {
		n = append(n, a.Rule)
	}
	return n
}
