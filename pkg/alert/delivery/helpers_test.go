package delivery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/alert"
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
func claimantInput() alert.Input {
	s, p := session(), process()
	p.AuditID, p.ClaimedAuditID, p.Attribution = "", s.AuditID, ""
	p.ContainerID = "e9ca6c735a09"
	return alert.Input{Claimed: s, Process: p}
}

// newTestEngine runs the shipped rules, for real alert payloads.
func newTestEngine(t testing.TB) *alert.Engine {
	t.Helper()
	e, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// countingSink counts alerts its sink accepted.
type countingSink struct {
	Deliverer
	mu sync.Mutex
	n  *int
}

func (c *countingSink) Deliver(ctx context.Context, alerts []store.Alert) error {
	err := c.Deliverer.Deliver(ctx, alerts)
	if err == nil {
		c.mu.Lock()
		*c.n += len(alerts)
		c.mu.Unlock()
	}
	return err
}

func (c *countingSink) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.n
}
