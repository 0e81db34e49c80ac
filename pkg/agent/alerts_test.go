package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

type recordingOutlet struct {
	mu     sync.Mutex
	alerts []store.Alert
}

func (r *recordingOutlet) Submit(_ context.Context, as []store.Alert) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alerts = append(r.alerts, as...)
	return nil
}

func (r *recordingOutlet) rules() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.alerts {
		out = append(out, a.Rule)
	}
	return out
}

// mapLookup answers LookupExec from a map, as the Elasticsearch lookup
// answers from an index.
type mapLookup struct {
	mu    sync.Mutex
	recs  map[string][]auditlog.ExecRecord
	asked []string
}

func (m *mapLookup) LookupExec(_ context.Context, id string) ([]auditlog.ExecRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = append(m.asked, id)
	return m.recs[id], nil
}

func startAgent(t *testing.T, opts ...Option) (*Agent, *sqlite.Store, *store.Writer) {
	t.Helper()
	return startAgentIn(t, staticMeta{ctr: {ContainerID: ctr, Namespace: "kube-system", Pod: "etcd-0", Container: "etcd"}}, opts...)
}

// startAgentIn runs an agent whose containers resolve through res.
func startAgentIn(t *testing.T, res Resolver, opts ...Option) (*Agent, *sqlite.Store, *store.Writer) {
	t.Helper()
	return startAgentWith(t, res, nil, nil, opts...)
}

// startAgentWith runs an agent whose containers resolve through res, with
// the shipped settings as tune leaves them and, when now is not nil, on
// that clock (the expiry tick still runs every 10ms: it reads the clock).
func startAgentWith(t *testing.T, res Resolver, tune func(*Config), now func() time.Time, opts ...Option) (*Agent, *sqlite.Store, *store.Writer) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	w := store.NewWriter(st, 100, 10*time.Millisecond, store.WithCommitWhenIdle())
	cfg := Default()
	cfg.ExpireEvery = 10 * time.Millisecond
	cfg.LookupDelay = 0 // the lookup's own tests set it
	if tune != nil {
		tune(&cfg)
	}
	a, err := New(cfg, res, w, zerolog.Nop(), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		a.now = now
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; w.Close(); st.Close() })
	return a, st, w
}

// TestAlertsStoredAndSubmitted: a forged root in kube-system raises the
// default rules' alerts once its wait for a record is over, stored and
// handed to the outlet.
func TestAlertsStoredAndSubmitted(t *testing.T) {
	eng, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &recordingOutlet{}
	clock := newFakeClock()
	a, st, w := startAgentWith(t, staticMeta{ctr: {ContainerID: ctr, Namespace: "kube-system", Pod: "etcd-0", Container: "etcd"}},
		nil, clock.Now, WithAlerts(eng, out))
	ctx := context.Background()
	ev := capture.Event{Exec: capture.Exec{ProcessID: "200-1", ParentProcessID: "199-1",
		PID: 200, PPID: 199, Argv: []string{"sh"}, ContainerID: ctr}, Kind: capture.KindExec, Time: clock.Now(),
		AuditID: "0d8e6c1e-5b5c-4c55-9d7c-6a1f1f6e2f10",
		Source:  vocab.SourceEnv, Flags: []string{vocab.FlagRootUnverified}}
	if err := a.Process(ctx, ev); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, a, 1)
	clock.Advance(a.cfg.Join.PendingTTL)
	var stored []store.Alert
	testutil.EventuallyNil(t, func() error {
		w.Flush(ctx)
		var err error
		if stored, _, err = st.ListAlerts(ctx, store.AlertFilter{}); err != nil {
			return err
		}
		if len(stored) == 0 {
			return errors.New("no alert stored yet")
		}
		return nil
	})
	var rules []string
	for _, al := range stored {
		rules = append(rules, al.Rule)
		if al.ProcessID != "200-1" {
			t.Errorf("alert %s names process %q", al.Rule, al.ProcessID)
		}
	}
	if len(rules) == 0 {
		t.Fatal("no alert stored for a forged root")
	}
	slices.Sort(rules)
	got := out.rules()
	slices.Sort(got)
	if !slices.Equal(rules, got) {
		t.Errorf("stored alerts %v, submitted %v: want the same", rules, got)
	}
}

// TestAuditLookupAttributes: with no audit record on this node, the agent
// asks the lookup once and attributes the process from its answer.
func TestAuditLookupAttributes(t *testing.T) {
	id := "6a7f1a40-2f0e-4b8e-9a43-0c1d2e3f4a5b"
	p := auditlog.NewParser(0)
	m := auditlog.NewMerger(auditlog.MergerConfig{})
	var rec auditlog.ExecRecord
	for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
		for _, ev := range p.ParseLine(execLine(id, "alice", time.Now(), stage)) {
			if res := m.Add(ev); len(res.Updated) > 0 {
				rec = res.Updated[len(res.Updated)-1]
			}
		}
	}
	rec.Namespace, rec.Pod, rec.Container = "kube-system", "etcd-0", "etcd"
	l := &mapLookup{recs: map[string][]auditlog.ExecRecord{id: {rec}}}
	a, st, w := startAgent(t, WithAuditLookup(l, 2))
	ctx := context.Background()
	// The session's root and its child: one request lands one root.
	for i, pid := range []uint32{300, 301} {
		ev := capture.Event{Exec: capture.Exec{ProcessID: "30" + string(rune('0'+i)) + "-1",
			ParentProcessID: "299-1", PID: pid, PPID: 299, Argv: []string{"sh"}, ContainerID: ctr, SessionRootID: "300-1"},
			Kind: capture.KindExec, Time: time.Now(), AuditID: id, Source: vocab.SourceEnv}
		if i == 1 {
			ev.ParentProcessID, ev.PPID, ev.Source = "300-1", 300, vocab.SourceInherited
		}
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyNil(t, func() error {
		w.Flush(ctx)
		d, err := st.GetSession(ctx, id)
		if err == nil && d.User.Username == "alice" && len(d.Processes) == 2 && d.Processes[0].Attribution == "audit_id" {
			return nil
		}
		return fmt.Errorf("not attributed through the lookup: %+v, %v", d, err)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.asked) != 1 {
		t.Errorf("lookup asked %v, want the ID once", l.asked)
	}
}
