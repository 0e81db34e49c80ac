package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// Two exec sessions in shop/web-0 whose processes carry their audit IDs:
// lateID's record comes after the pending TTL, lostID's never does.
const (
	lateID   = "3f2b9c1e-7d4a-4e8b-9c0d-1e2f3a4b5c6d"
	lostID   = "8a7b6c5d-4e3f-4a1b-8c2d-3e4f5a6b7c8d"
	lateProc = "300-1"
	lostProc = "400-1"
)

var shopPod = staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}}

// sessionRoot is the runtime's exec of an ID-carrying root.
func sessionRoot(processID string, pid uint32, auditID string, at time.Time) capture.Event {
	return capture.Event{Kind: capture.KindExec, Time: at, AuditID: auditID, Source: vocab.SourceEnv, Flags: []string{},
		Exec: capture.Exec{ProcessID: processID, ParentProcessID: fmt.Sprint(pid-1, "-1"), PID: pid, PPID: pid - 1,
			ContainerID: ctr, SessionRootID: processID, Filename: "/bin/sh", Argv: []string{"sh"}}}
}

// sendRecord delivers id's exec record (both stages), received at.
func sendRecord(t *testing.T, a *Agent, id string, at time.Time) {
	t.Helper()
	p := auditlog.NewParser(0)
	for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
		if err := a.AuditSink()(context.Background(), p.ParseLine(execLine(id, "alice", at, stage))); err != nil {
			t.Fatal(err)
		}
	}
}

// runAgentOn runs an agent on the SQLite store at path until stop, with
// the options opts gives for the store.
func runAgentOn(t *testing.T, path string, clock *fakeClock, opts func(*sqlite.Store) []Option) (a *Agent, st *sqlite.Store, w *store.Writer, stop func()) {
	t.Helper()
	st, err := sqlite.Open(path, sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	w = store.NewWriter(st, 100, 10*time.Millisecond, store.WithCommitWhenIdle())
	cfg := Default()
	cfg.ExpireEvery = 10 * time.Millisecond
	if a, err = New(cfg, shopPod, w, zerolog.Nop(), nil, opts(st)...); err != nil {
		t.Fatal(err)
	}
	a.now = clock.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			w.Close()
			st.Close()
		}
	}
	t.Cleanup(stop)
	return a, st, w, stop
}

// storedAlert waits for process's alert of rule in the store.
func storedAlert(t *testing.T, st *sqlite.Store, w *store.Writer, process, rule string, want func(store.Alert) error) store.Alert {
	t.Helper()
	var got store.Alert
	testutil.EventuallyNil(t, func() error {
		w.Flush(context.Background())
		as, _, err := st.ListAlerts(context.Background(), store.AlertFilter{ProcessID: process, Rule: rule})
		if err != nil {
			return err
		}
		if len(as) != 1 {
			return fmt.Errorf("%d %s alerts stored for %s, want 1", len(as), rule, process)
		}
		got = as[0]
		return want(got)
	})
	return got
}

func raised(a store.Alert) error {
	if a.Status != "" {
		return fmt.Errorf("alert %s is %q, want it raised", a.ID, a.Status)
	}
	return nil
}

func resolved(a store.Alert) error {
	if a.Status != store.AlertResolved || a.ResolvedAt.IsZero() || a.Resolution == "" {
		return fmt.Errorf("alert %s: status %q at %v (%q), want it resolved", a.ID, a.Status, a.ResolvedAt, a.Resolution)
	}
	return nil
}

// submitted returns what out received of alert id, in order.
func (r *recordingOutlet) submitted(id string) []store.Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Alert
	for _, a := range r.alerts {
		if a.ID == id {
			out = append(out, a)
		}
	}
	return out
}

// raiseNoRecord starts both sessions' roots and lets the pending TTL pass
// with no record, so that each raises no-audit-record.
func raiseNoRecord(t *testing.T, a *Agent, st *sqlite.Store, w *store.Writer, clock *fakeClock) (late, lost store.Alert) {
	t.Helper()
	start := clock.Now()
	for _, ev := range []capture.Event{sessionRoot(lateProc, 300, lateID, start), sessionRoot(lostProc, 400, lostID, start)} {
		if err := a.Process(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	// The wait runs from when the agent took them in.
	testutil.EventuallyNil(t, func() error {
		w.Flush(context.Background())
		ps, _, err := st.ListProcesses(context.Background(), store.ProcessFilter{Namespace: "shop"})
		if err != nil || len(ps) != 2 {
			return fmt.Errorf("%d processes stored (%v), want 2", len(ps), err)
		}
		return nil
	})
	clock.Advance(a.cfg.Join.PendingTTL + time.Second)
	return storedAlert(t, st, w, lateProc, "no-audit-record", raised), storedAlert(t, st, w, lostProc, "no-audit-record", raised)
}

// TestLateRecordResolvesAlert: no-audit-record raised on a process whose
// record came after the pending TTL is resolved, under its own ID, in the
// store and at the outlet; the process whose record never came keeps its
// alert (the positive control).
func TestLateRecordResolvesAlert(t *testing.T) {
	eng, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &recordingOutlet{}
	clock := newFakeClock()
	start := clock.Now()
	a, st, w, _ := runAgentOn(t, filepath.Join(t.TempDir(), "c.db"), clock,
		func(*sqlite.Store) []Option { return []Option{WithAlerts(eng, out)} })
	late, lost := raiseNoRecord(t, a, st, w, clock)

	sendRecord(t, a, lateID, start)
	got := storedAlert(t, st, w, lateProc, "no-audit-record", resolved)
	if got.ID != late.ID || got.Message != late.Message || !got.Time.Equal(late.Time) {
		t.Errorf("stored resolution %+v does not keep alert %+v", got, late)
	}
	if want := "attributed the process to session " + lateID + " of user alice; it is no longer flagged no_audit_record"; !strings.Contains(got.Resolution, want) {
		t.Errorf("resolution %q, want it to say %q", got.Resolution, want)
	}
	testutil.EventuallyNil(t, func() error {
		subs := out.submitted(late.ID)
		if len(subs) != 2 || subs[0].Status != "" || resolved(subs[1]) != nil {
			return fmt.Errorf("outlet got %+v for %s, want the alert then its resolution", subs, late.ID)
		}
		return nil
	})
	lateAttributed(t, st)
	storedAlert(t, st, w, lostProc, "no-audit-record", raised)
	if subs := out.submitted(lost.ID); len(subs) != 1 {
		t.Errorf("outlet got %+v for the unanswered process, want the alert alone", subs)
	}
	if v := promtest.ToFloat64(a.resolved.evicted); v != 0 {
		t.Errorf("evictions %v, want 0", v)
	}
}

// lateAttributed checks that lateProc is stored attributed to lateID by
// a late record.
func lateAttributed(t *testing.T, st *sqlite.Store) {
	t.Helper()
	d, err := st.GetSession(context.Background(), lateID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Processes {
		if p.ProcessID == lateProc && p.RecordDelay > 0 && slices.Contains(p.Flags, vocab.FlagLateAuditRecord) {
			return
		}
	}
	t.Errorf("session %s processes %+v: want %s attributed late", lateID, d.Processes, lateProc)
}

// TestLateRecordResolvesAfterRestart: the agent that raised the alert is
// gone; the next one, its memory empty, reads the unattributed process
// back from the store (WithRestore) and, when the record comes, the
// process's alerts too (WithAlertHistory), and resolves the one the record
// contradicts.
func TestLateRecordResolvesAfterRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	clock := newFakeClock()
	start := clock.Now()
	eng1, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a1, st1, w1, stop1 := runAgentOn(t, path, clock,
		func(*sqlite.Store) []Option { return []Option{WithAlerts(eng1, &recordingOutlet{})} })
	late, lost := raiseNoRecord(t, a1, st1, w1, clock)
	stop1()

	eng2, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &recordingOutlet{}
	hist := &countingHistory{}
	clock.Advance(time.Minute)
	a2, st2, w2, _ := runAgentOn(t, path, clock, func(st *sqlite.Store) []Option {
		return []Option{WithAlerts(eng2, out), WithRestore(st, DefaultRestoreMax), WithAlertHistory(hist.of(st))}
	})
	// Run restores them before it takes in any record.
	sendRecord(t, a2, lateID, start)
	got := storedAlert(t, st2, w2, lateProc, "no-audit-record", resolved)
	if got.ID != late.ID {
		t.Errorf("stored resolution %s, want alert %s", got.ID, late.ID)
	}
	testutil.EventuallyNil(t, func() error {
		if subs := out.submitted(late.ID); len(subs) != 1 || resolved(subs[0]) != nil {
			return fmt.Errorf("outlet got %+v for %s, want its resolution", subs, late.ID)
		}
		return nil
	})
	lateAttributed(t, st2)
	if n := hist.asked.Load(); n != 1 {
		t.Errorf("the store was asked %d times for the process's alerts, want once", n)
	}
	storedAlert(t, st2, w2, lostProc, "no-audit-record", raised)
	if subs := out.submitted(lost.ID); len(subs) != 0 {
		t.Errorf("outlet got %+v for the unanswered process, want nothing", subs)
	}
}

// countingHistory is a store's AlertHistory that counts the reads.
type countingHistory struct {
	AlertHistory
	asked atomic.Int32
}

func (h *countingHistory) of(st AlertHistory) *countingHistory { h.AlertHistory = st; return h }

func (h *countingHistory) ListAlerts(ctx context.Context, f store.AlertFilter) ([]store.Alert, string, error) {
	h.asked.Add(1)
	return h.AlertHistory.ListAlerts(ctx, f)
}

// TestLateRecordResolvesHeldAlerts: kubectl debug's processes, held for
// their attribution (alerts_wait.go), wait out the pending TTL with no
// record and are judged: tamper-root-unverified and no-audit-record. When
// bob's record comes after all, both are resolved for both processes; the
// rule on argv alone and the forged root beside them (no record ever)
// keep theirs.
func TestLateRecordResolvesHeldAlerts(t *testing.T) {
	eng, err := alert.NewEngine(debugRules(t), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &recordingOutlet{}
	clock := newFakeClock()
	t0 := clock.Now()
	a, st, w := startAgentWith(t, debugPod, nil, clock.Now, WithAlerts(eng, out))
	ctx := context.Background()
	for _, ev := range debugProcesses(t0.Add(time.Second)) {
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	waitHeld(t, a, 3)
	clock.Advance(a.cfg.Join.PendingTTL)
	waitHeld(t, a, 0)
	for _, pid := range []string{debugInit, debugCat, forged} {
		for _, rule := range []string{"tamper-root-unverified", "no-audit-record"} {
			storedAlert(t, st, w, pid, rule, raised)
		}
	}
	if err := a.AuditSink()(ctx, debugRecord(t0)); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{debugInit, debugCat} {
		for _, rule := range []string{"tamper-root-unverified", "no-audit-record"} {
			got := storedAlert(t, st, w, pid, rule, resolved)
			if !strings.Contains(got.Resolution, "of user bob") {
				t.Errorf("%s on %s: resolution %q does not name bob's session", rule, pid, got.Resolution)
			}
			testutil.EventuallyNil(t, func() error {
				if subs := out.submitted(got.ID); len(subs) != 2 || resolved(subs[1]) != nil {
					return fmt.Errorf("%s on %s: outlet got %+v, want the alert then its resolution", rule, pid, subs)
				}
				return nil
			})
		}
	}
	for _, rule := range []string{"tamper-root-unverified", "no-audit-record"} {
		storedAlert(t, st, w, forged, rule, raised)
	}
	storedAlert(t, st, w, debugCat, "cat-proc", raised)
}
