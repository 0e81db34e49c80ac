package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// fakeClock is the agent's injected clock: a test moves it, the expiry
// tick reads it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// waitHeld waits until the agent holds n processes for their attribution.
func waitHeld(t *testing.T, a *Agent, n int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%d processes held for their attribution", n), func() bool {
		return promtest.ToFloat64(a.waits.holding) == float64(n)
	})
}

func released(a *Agent, reason string) float64 {
	return promtest.ToFloat64(a.waits.released.WithLabelValues(reason))
}

// The kubectl debug of the e2e-cluster run (issue 30): bob's ephemeral
// container dbg in shop/web-0, through the exec bridge; beside it, in the
// app container, a root that planted an audit ID no request has.
const (
	ctrDbg    = "d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0"
	debugID   = "7b2e4f60-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	bridgeID  = "5d41402a-bc4b-4a76-b971-9d911017c592"
	forgedID  = "0d8e6c1e-5b5c-4c55-9d7c-6a1f1f6e2f10"
	debugInit = "700-1"
	debugCat  = "701-1"
	forged    = "800-1"
)

var debugPod = staticMeta{
	ctr:    {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"},
	ctrDbg: {ContainerID: ctrDbg, Namespace: "shop", Pod: "web-0", Container: "dbg"},
}

// debugRules are the shipped rules and one that reads the process alone,
// which judges at once.
func debugRules(t *testing.T) []alert.Rule {
	t.Helper()
	own, err := alert.ParseRules([]byte(`rules:
  - {name: cat-proc, severity: low, scope: process, message: "$(argv) in $(namespace)/$(pod)/$(container)", match: {argv: "/bin/cat /proc/*"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	return append(alert.DefaultRules(), own...)
}

// debugProcesses are what the kernel reports of the debug container: its
// init, started by the runtime with the bridge's ID in its env (flagged
// root_unverified: the pairing with the record vouches for it), a child
// that exits before the record is read, and the init's in-place exec of
// its last command; and the forged root.
func debugProcesses(at time.Time) []capture.Event {
	bridge := func(src vocab.Source) map[string]capture.KeyValue {
		return map[string]capture.KeyValue{vocab.BridgeKey: {Value: bridgeID, Source: src, Flags: []string{vocab.FlagRootUnverified}}}
	}
	code := 0
	return []capture.Event{
		{Kind: capture.KindExec, Time: at, ExecOrigin: capture.OriginContainerInit, Keys: bridge(vocab.SourceEnv), Flags: []string{},
			Exec: capture.Exec{ProcessID: debugInit, ParentProcessID: "690-1", PID: 700, PPID: 690, ContainerID: ctrDbg,
				SessionRootID: debugInit, Filename: "/bin/sh", Argv: []string{"sh", "-c", "cat /proc/uptime; sleep 1"}}},
		{Kind: capture.KindExec, Time: at.Add(100 * time.Millisecond), ExecOrigin: capture.OriginInside, Keys: bridge(vocab.SourceInherited), Flags: []string{},
			Exec: capture.Exec{ProcessID: debugCat, ParentProcessID: debugInit, PID: 701, PPID: 700, ContainerID: ctrDbg,
				SessionRootID: debugInit, Filename: "/bin/cat", Argv: []string{"/bin/cat", "/proc/uptime"}}},
		{Kind: capture.KindExit, Time: at.Add(150 * time.Millisecond), ExitCode: &code, Exec: capture.Exec{ProcessID: debugCat}},
		{Kind: capture.KindExec, Time: at.Add(200 * time.Millisecond), ExecOrigin: capture.OriginInside, Keys: bridge(vocab.SourceInherited), Flags: []string{},
			Exec: capture.Exec{ProcessID: debugInit, ParentProcessID: "690-1", PID: 700, PPID: 690, ContainerID: ctrDbg,
				SessionRootID: debugInit, Filename: "/bin/sleep", Argv: []string{"sleep", "1"}}},
		{Kind: capture.KindExec, Time: at, ExecOrigin: capture.OriginInside, AuditID: forgedID, Source: vocab.SourceEnv,
			Flags: []string{vocab.FlagRootUnverified},
			Exec: capture.Exec{ProcessID: forged, ParentProcessID: "799-1", PID: 800, PPID: 799, ContainerID: ctr,
				SessionRootID: forged, Filename: "/bin/sh", Argv: []string{"sh"}}},
	}
}

// debugRecord is bob's pods/ephemeralcontainers request, as the webhook
// delivers it: the bridge's annotation names the container's ID.
func debugRecord(at time.Time) []auditlog.Event {
	req := testutil.ExecRequest{AuditID: debugID, User: "bob", Groups: []string{"dev", "system:authenticated"},
		Namespace: "shop", Pod: "web-0", Container: "dbg", Command: []string{"sh", "-c", "cat /proc/uptime; sleep 1"},
		Received: at, Duration: 50 * time.Millisecond, Ephemeral: true,
		Annotations: map[string]string{vocab.BridgeWebhookName + "/" + vocab.BridgeKey: bridgeID}}
	p := auditlog.NewParser(0)
	var evs []auditlog.Event
	for line := range strings.Lines(string(req.LogLines())) {
		evs = append(evs, p.ParseLine([]byte(line))...)
	}
	return evs
}

// TestDebugContainerAlertsEitherOrder: kubectl debug's processes and
// their record, in each order, raise the same alerts: none of the rules
// that read attribution for bob's debug session (its processes are held
// until the record is read, then exempt), the rule on argv alone at once
// and under one ID, and, for the forged root beside it (the positive
// control), tamper-root-unverified and no-audit-record once the pending
// TTL is over, saying they waited that long.
func TestDebugContainerAlertsEitherOrder(t *testing.T) {
	const ttl = 2 * time.Minute
	ids := map[bool][]string{}
	for _, recordFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("recordFirst=%v", recordFirst), func(t *testing.T) {
			eng, err := alert.NewEngine(debugRules(t), zerolog.Nop(), nil)
			if err != nil {
				t.Fatal(err)
			}
			clock := newFakeClock()
			t0 := clock.Now()
			a, st, w := startAgentWith(t, debugPod, func(c *Config) { c.Join.PendingTTL = ttl }, clock.Now, WithAlerts(eng, nil))
			ctx := context.Background()
			stored := func(rule string) []store.Alert {
				w.Flush(ctx)
				as, _, err := st.ListAlerts(ctx, store.AlertFilter{Rule: rule})
				if err != nil {
					t.Fatal(err)
				}
				return as
			}
			record := func() {
				if err := a.AuditSink()(ctx, debugRecord(t0)); err != nil {
					t.Fatal(err)
				}
			}
			if recordFirst {
				record()
			}
			for _, ev := range debugProcesses(t0.Add(time.Second)) {
				if err := a.Process(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}
			if !recordFirst {
				// Before the record: the debug container's init and
				// child and the forged root wait; the rule on argv
				// does not.
				waitHeld(t, a, 3)
				waitFor(t, w, func() bool { return len(stored("cat-proc")) == 1 })
				if got := stored("tamper-root-unverified"); len(got) > 0 {
					t.Fatalf("tamper-root-unverified before the record was read: %v", got[0].Message)
				}
				record()
			}
			// The record read, bob's processes are his: let go, exempt.
			waitFor(t, w, func() bool {
				d, err := st.GetSession(ctx, debugID)
				return err == nil && d.User.Username == "bob" && len(d.Processes) == 2
			})
			waitHeld(t, a, 1)
			if !recordFirst && (released(a, releaseSettled) != 2 || promtest.ToFloat64(a.waits.cleared) != 2) {
				t.Errorf("debug processes let go: settled %v, cleared %v; want 2 each", released(a, releaseSettled),
					promtest.ToFloat64(a.waits.cleared))
			}
			if got := stored("tamper-root-unverified"); len(got) > 0 {
				t.Fatalf("tamper-root-unverified before the forged root's wait was over: %v", got[0].Message)
			}

			// The forged root's wait ends with the pending TTL.
			clock.Advance(ttl)
			waitHeld(t, a, 0)
			var all []store.Alert
			waitFor(t, w, func() bool { all = stored(""); return len(stored("no-audit-record")) == 1 })
			for _, al := range all {
				ids[recordFirst] = append(ids[recordFirst], al.Rule+" "+al.ProcessID+" "+al.ID)
				if al.Rule == "cat-proc" {
					continue
				}
				if al.ProcessID != forged {
					t.Errorf("%s raised for %s: %s", al.Rule, al.ProcessID, al.Message)
				}
				var pl struct{ Settled *alert.Settled }
				if err := json.Unmarshal(al.Payload, &pl); err != nil {
					t.Fatal(err)
				}
				if want := (alert.Settled{By: vocab.FlagNoAuditRecord, AfterSeconds: ttl.Seconds()}); pl.Settled == nil || *pl.Settled != want {
					t.Errorf("%s: settled %+v, want %+v", al.Rule, pl.Settled, want)
				}
			}
			held := 3.0 // the debug init and child, and the forged root
			if recordFirst {
				held = 1
			}
			if released(a, releaseSettled) != held || released(a, releaseWaitOver) != 0 {
				t.Errorf("released settled %v, wait_over %v; want %v, 0", released(a, releaseSettled), released(a, releaseWaitOver), held)
			}
			slices.Sort(ids[recordFirst])
			want := []string{"cat-proc " + debugCat, "no-audit-record " + forged, "tamper-root-unverified " + forged}
			if len(ids[recordFirst]) != len(want) {
				t.Fatalf("alerts %v, want %v", ids[recordFirst], want)
			}
			for i, w := range want {
				if !strings.HasPrefix(ids[recordFirst][i], w+" ") {
					t.Errorf("alerts %v, want %v", ids[recordFirst], want)
				}
			}
			for _, al := range all {
				if al.Rule == "tamper-root-unverified" && !strings.HasSuffix(al.Message, "settled after 2m0s: no_audit_record)") {
					t.Errorf("message %q does not say how long it waited", al.Message)
				}
			}
		})
	}
	if !slices.Equal(ids[false], ids[true]) {
		t.Errorf("process first: %v\nrecord first: %v\nwant the same alerts", ids[false], ids[true])
	}
}

// TestDeferredOverCap: past MaxDeferredAlerts the oldest held process is
// judged at once, and its alert says it was judged early; the other stays
// held.
func TestDeferredOverCap(t *testing.T) {
	eng, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	a, st, w := startAgentWith(t, debugPod, func(c *Config) { c.MaxDeferredAlerts = 1 }, clock.Now, WithAlerts(eng, nil))
	ctx := context.Background()
	ev := debugProcesses(clock.Now())[4] // the forged root
	if err := a.Process(ctx, ev); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, a, 1)
	clock.Advance(1500 * time.Millisecond)
	ev.ProcessID, ev.PID = "801-1", 801
	if err := a.Process(ctx, ev); err != nil {
		t.Fatal(err)
	}
	var got []store.Alert
	waitFor(t, w, func() bool {
		got, _, err = st.ListAlerts(ctx, store.AlertFilter{Rule: "tamper-root-unverified"})
		return err == nil && len(got) == 1
	})
	var pl struct{ Settled *alert.Settled }
	if err := json.Unmarshal(got[0].Payload, &pl); err != nil {
		t.Fatal(err)
	}
	want := alert.Settled{By: alert.SettledOverCap, AfterSeconds: 1.5, Early: true}
	if got[0].ProcessID != forged || pl.Settled == nil || *pl.Settled != want {
		t.Errorf("alert for %s settled %+v; want the oldest, %+v", got[0].ProcessID, pl.Settled, want)
	}
	waitHeld(t, a, 1)
	if v := released(a, releaseOverCap); v != 1 {
		t.Errorf("released over_cap %v, want 1", v)
	}
}

// TestDeferredJudgedWhenStopping: a process still held when the agent
// stops is judged then (a restarted agent does not see it again), early.
func TestDeferredJudgedWhenStopping(t *testing.T) {
	eng, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &recordingOutlet{}
	st, err := sqlite.Open(t.TempDir()+"/c.db", sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := store.NewWriter(st, 100, 10*time.Millisecond, store.WithCommitWhenIdle())
	defer w.Close()
	cfg := Default()
	cfg.ExpireEvery = 10 * time.Millisecond
	a, err := New(cfg, debugPod, w, zerolog.Nop(), nil, WithAlerts(eng, out))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	if err := a.Process(ctx, debugProcesses(time.Now())[4]); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, a, 1)
	if got := out.rules(); len(got) != 0 {
		t.Fatalf("raised %v while held", got)
	}
	cancel()
	<-done
	if got := out.rules(); !slices.Equal(got, []string{"tamper-root-unverified"}) {
		t.Fatalf("raised %v when stopping, want tamper-root-unverified", got)
	}
	var pl struct{ Settled *alert.Settled }
	if err := json.Unmarshal(out.alerts[0].Payload, &pl); err != nil {
		t.Fatal(err)
	}
	if pl.Settled == nil || pl.Settled.By != alert.SettledStopping || !pl.Settled.Early {
		t.Errorf("settled %+v, want stopping, early", pl.Settled)
	}
	if v := released(a, releaseStopping); v != 1 {
		t.Errorf("released stopping %v, want 1", v)
	}
}

// TestClaimSettledByRecord: a root that planted a live session's ID, seen
// before that session's record, waits; the record read, it is the
// borrower of a known session (borrowed-audit-id, settled by the record),
// though the join's answer for it did not change, and never
// tamper-root-unverified.
func TestClaimSettledByRecord(t *testing.T) {
	eng, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	a, st, w := startAgentWith(t, debugPod, nil, clock.Now, WithAlerts(eng, nil))
	ctx := context.Background()
	ev := debugProcesses(clock.Now())[4] // the forged root, here with alice's ID
	ev.AuditID = "3c1d7e52-8a4b-4f61-9e0a-5b2c7d8e9f10"
	if err := a.Process(ctx, ev); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, a, 1)
	clock.Advance(3 * time.Second)
	p := auditlog.NewParser(0)
	for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
		if err := a.AuditSink()(ctx, p.ParseLine(execLine(ev.AuditID, "alice", clock.Now(), stage))); err != nil {
			t.Fatal(err)
		}
	}
	var got []store.Alert
	waitFor(t, w, func() bool {
		got, _, err = st.ListAlerts(ctx, store.AlertFilter{})
		return err == nil && len(got) > 0
	})
	waitHeld(t, a, 0)
	if len(got) != 1 || got[0].Rule != "borrowed-audit-id" || got[0].ProcessID != forged {
		t.Fatalf("raised %v, want borrowed-audit-id for %s alone", got, forged)
	}
	var pl struct{ Settled *alert.Settled }
	if err := json.Unmarshal(got[0].Payload, &pl); err != nil {
		t.Fatal(err)
	}
	if want := (alert.Settled{By: alert.SettledRecord, AfterSeconds: 3}); pl.Settled == nil || *pl.Settled != want {
		t.Errorf("settled %+v, want %+v", pl.Settled, want)
	}
}
