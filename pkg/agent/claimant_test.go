package agent

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// recordingAlerter keeps every input it evaluates, by process ID.
type recordingAlerter struct {
	Alerter
	mu  sync.Mutex
	ins map[string][]alert.Input
}

func (r *recordingAlerter) Evaluate(in alert.Input, now time.Time) []store.Alert {
	if in.Process != nil {
		r.mu.Lock()
		r.ins[in.Process.ProcessID] = append(r.ins[in.Process.ProcessID], in)
		r.mu.Unlock()
	}
	return r.Alerter.Evaluate(in, now)
}

func (r *recordingAlerter) inputs(processID string) []alert.Input {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ins[processID]
}

// TestClaimantEvaluatedWithClaimedSession: a process that took a live
// session's ID inside the container is evaluated with that session as
// Claimed, never as its Session, and raises borrowed-audit-id naming the
// claimed user and the real process; the session's own root does not.
func TestClaimantEvaluatedWithClaimedSession(t *testing.T) {
	eng, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingAlerter{Alerter: eng, ins: map[string][]alert.Input{}}
	out := &recordingOutlet{}
	a, st, w := startAgentIn(t, staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}}, WithAlerts(rec, out))
	ctx := context.Background()
	id := "3c1d7e52-8a4b-4f61-9e0a-5b2c7d8e9f10"
	now := time.Now()
	p := auditlog.NewParser(0)
	for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
		if err := a.AuditSink()(ctx, p.ParseLine(execLine(id, "alice", now, stage))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, w, func() bool { s, err := st.GetSession(ctx, id); return err == nil && s.User.Username == "alice" })

	root := capture.Event{Exec: capture.Exec{ProcessID: "100-1", ParentProcessID: "90-1", PID: 100, PPID: 90,
		Argv: []string{"sh"}, Filename: "/bin/sh", ContainerID: ctr}, Kind: capture.KindExec, Time: now,
		AuditID: id, Source: vocab.SourceEnv}
	// Two borrowers, in two batches: the second finds the session only in
	// the joiner, not in its batch.
	var borrowers []capture.Event
	for i, pid := range []uint32{400, 401} {
		borrowers = append(borrowers, capture.Event{Exec: capture.Exec{ProcessID: []string{"400-1", "401-1"}[i],
			ParentProcessID: "50-1", PID: pid, PPID: 50, Argv: []string{"curl", "http://x"}, Filename: "/usr/bin/curl",
			ContainerID: ctr}, Kind: capture.KindExec, Time: now,

			AuditID: id, Source: vocab.SourceEnv, Flags: []string{vocab.FlagRootUnverified}})
	}
	for _, ev := range append([]capture.Event{root}, borrowers...) {
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	byProcess := map[string][]store.Alert{}
	waitFor(t, w, func() bool {
		alerts, _, err := st.ListAlerts(ctx, store.AlertFilter{Rule: "borrowed-audit-id"})
		if err != nil {
			t.Fatal(err)
		}
		clear(byProcess)
		for _, al := range alerts {
			byProcess[al.ProcessID] = append(byProcess[al.ProcessID], al)
		}
		return len(byProcess["400-1"]) > 0 && len(byProcess["401-1"]) > 0
	})
	if len(byProcess["100-1"]) > 0 {
		t.Errorf("the session's own root raised borrowed-audit-id: %v", byProcess["100-1"])
	}
	for _, b := range borrowers {
		al := byProcess[b.ProcessID][0]
		for _, want := range []string{"/usr/bin/curl", b.ProcessID, "shop/web-0/app", ctr, id, "of alice without", "not attributed to alice"} {
			if !strings.Contains(al.Message, want) {
				t.Errorf("%s: message %q lacks %q", b.ProcessID, al.Message, want)
			}
		}
		var pl struct {
			Session *join.Session `json:"session"`
			Claimed *join.Session `json:"claimed"`
		}
		if err := json.Unmarshal(al.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		if al.AuditID != "" || pl.Session != nil || pl.Claimed == nil || pl.Claimed.User.Username != "alice" {
			t.Errorf("%s: alert session %q, payload session %v, claimed %v: want alice only as claimed", b.ProcessID, al.AuditID, pl.Session, pl.Claimed)
		}
		ins := rec.inputs(b.ProcessID)
		if len(ins) == 0 {
			t.Fatalf("%s: never evaluated", b.ProcessID)
		}
		for _, in := range ins {
			if in.Session != nil || in.Claimed == nil || in.Claimed.AuditID != id {
				t.Errorf("%s: evaluated with session %v, claimed %v; want only the claimed session", b.ProcessID, in.Session, in.Claimed)
			}
		}
	}
	for _, in := range rec.inputs("100-1") {
		if in.Session == nil || in.Session.User.Username != "alice" || in.Claimed != nil {
			t.Errorf("root: evaluated with session %v, claimed %v; want its session", in.Session, in.Claimed)
		}
	}
}

// waitFor flushes the writer until cond holds.
func waitFor(t *testing.T, w *store.Writer, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, "the condition holds after a flush", func() bool {
		w.Flush(context.Background())
		return cond()
	})
}
