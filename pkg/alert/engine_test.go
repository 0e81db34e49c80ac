package alert

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAlertIDStable(t *testing.T) {
	in := Input{Session: session(), Process: process()}
	in.Process.Flags = []string{"env_mismatch"}
	// Two engines stand for a restart: the same input gives the same ID.
	a := newTestEngine(t, DefaultRules(), nil).Evaluate(in, t0)
	b := newTestEngine(t, DefaultRules(), nil).Evaluate(in, t0.Add(3600e9))
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("alerts %d, %d; want 1 each", len(a), len(b))
	}
	if a[0].ID != b[0].ID {
		t.Errorf("IDs differ across engines: %s %s", a[0].ID, b[0].ID)
	}
	if a[0].ProcessID != in.Process.ProcessID || a[0].AuditID != in.Session.AuditID {
		t.Errorf("alert ids: process %q audit %q", a[0].ProcessID, a[0].AuditID)
	}
	// Another process of the same session: another ID.
	in2 := in
	p2 := *in.Process
	p2.ProcessID, p2.PID = "1235-1700000000000000001", 1235
	in2.Process = &p2
	c := newTestEngine(t, DefaultRules(), nil).Evaluate(in2, t0)
	if len(c) != 1 || c[0].ID == a[0].ID {
		t.Fatalf("another process got the same ID (or none): %v", c)
	}
	// Another matched fact (another flag) on the same process: another ID.
	in3 := Input{Session: session(), Process: process()}
	in3.Process.Flags = []string{"env_mismatch", "pod_mismatch"}
	d := newTestEngine(t, DefaultRules(), nil).Evaluate(in3, t0)
	if len(d) != 2 || d[0].ID == d[1].ID {
		t.Fatalf("want two distinct alerts: %v", d)
	}
	if d[0].ID != a[0].ID {
		t.Errorf("an added flag changed the env_mismatch alert's ID")
	}
}

func TestSessionScopeOneAlertPerSession(t *testing.T) {
	s := session()
	s.Namespace = "kube-system"
	e := newTestEngine(t, DefaultRules(), nil, WithRecentIDs(0))
	p1, p2 := process(), process()
	p2.ProcessID = "other"
	a := e.Evaluate(Input{Session: s, Process: p1}, t0)
	b := e.Evaluate(Input{Session: s, Process: p2}, t0)
	c := e.Evaluate(Input{Session: s}, t0)
	if len(a) != 1 || len(b) != 1 || len(c) != 1 {
		t.Fatalf("alerts %d %d %d", len(a), len(b), len(c))
	}
	if a[0].ID != b[0].ID || a[0].ID != c[0].ID || a[0].ProcessID != "" {
		t.Errorf("a session-scoped rule gave per-process alerts: %s %s %s (process %q)", a[0].ID, b[0].ID, c[0].ID, a[0].ProcessID)
	}
}

// TestConflictOneAlertPerSession: a reused audit ID is a fact about the
// requests, so tamper-audit-id-conflict is one alert per session however
// many of its processes carry the flag, and none for a process alone (an
// ambiguous one has no session to name).
func TestConflictOneAlertPerSession(t *testing.T) {
	s := session()
	s.Flags = []string{"audit_id_conflict"}
	e := newTestEngine(t, DefaultRules(), nil, WithRecentIDs(0))
	p1, p2 := process(), process()
	p2.ProcessID = "other"
	p1.Flags, p2.Flags = s.Flags, s.Flags
	ids := map[string]bool{}
	for _, in := range []Input{{Session: s, Process: p1}, {Session: s, Process: p2}, {Session: s}} {
		for _, a := range e.Evaluate(in, t0) {
			if a.Rule == "tamper-audit-id-conflict" {
				ids[a.ID] = true
			}
		}
	}
	if len(ids) != 1 {
		t.Errorf("tamper-audit-id-conflict: %d alerts for one session, want 1", len(ids))
	}
	// The second request's session is keyed <ID>~<hash>: the message
	// names the audit ID the requests shared, and the session apart.
	second := session()
	second.AuditID, second.Flags = s.AuditID+"~61d340440b1d", s.Flags
	second.Conflicts = []auditlog.ExecRecord{s.ExecRecord}
	for _, a := range e.Evaluate(Input{Session: second}, t0) {
		if want := "audit ID " + s.AuditID + " was used by more than one request"; a.Rule == "tamper-audit-id-conflict" &&
			!strings.HasPrefix(a.Message, want) {
			t.Errorf("message %q, want it to start %q", a.Message, want)
		}
	}
	lone := process()
	lone.Flags, lone.AuditID, lone.Attribution = s.Flags, "", "ambiguous"
	for _, a := range e.Evaluate(Input{Process: lone}, t0) {
		if a.Rule == "tamper-audit-id-conflict" {
			t.Errorf("an ambiguous process alone raised %s: %s", a.Rule, a.Message)
		}
	}
}

func TestRecentIDsSuppressRepeats(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newTestEngine(t, DefaultRules(), reg)
	s := session()
	s.Namespace = "kube-system"
	if n := len(e.Evaluate(Input{Session: s}, t0)); n != 1 {
		t.Fatalf("first evaluation: %d alerts", n)
	}
	if n := len(e.Evaluate(Input{Session: s}, t0)); n != 0 {
		t.Fatalf("repeat evaluation: %d alerts, want 0", n)
	}
	if v := testutil.ToFloat64(e.m.suppressed); v != 1 {
		t.Errorf("suppressed %v, want 1", v)
	}
	if v := testutil.ToFloat64(e.m.matches.WithLabelValues("exec-kube-system")); v != 1 {
		t.Errorf("matches %v, want 1", v)
	}
	if v := testutil.ToFloat64(e.m.evaluations); v != 2 {
		t.Errorf("evaluations %v, want 2", v)
	}
}

func TestPayload(t *testing.T) {
	in := Input{Session: session(), Process: process(), Labels: map[string]string{"app": "web"}}
	in.Process.Flags = []string{"denied_exec"}
	a := newTestEngine(t, DefaultRules(), nil).Evaluate(in, t0)
	if len(a) != 1 {
		t.Fatalf("%d alerts", len(a))
	}
	var p struct {
		Rule    struct{ Name, Severity string }
		Matched string
		Session struct{ User struct{ Username string } }
		Process struct{ ProcessID string }
		Labels  map[string]string
	}
	if err := json.Unmarshal(a[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Rule.Name != "tamper-denied-exec" || p.Rule.Severity != "critical" || p.Matched != "flags=denied_exec" ||
		p.Session.User.Username != "alice@example.com" || p.Process.ProcessID != in.Process.ProcessID || p.Labels["app"] != "web" {
		t.Errorf("payload %s", a[0].Payload)
	}
}

func BenchmarkEvaluate(b *testing.B) {
	e := newTestEngine(b, DefaultRules(), prometheus.NewRegistry(), WithRecentIDs(0))
	s := session()
	s.Command, s.TTY, s.Stdin = []string{"bash"}, yes(), yes()
	p := process()
	p.Flags = []string{"env_mismatch"}
	in := Input{Session: s, Process: p}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n += len(e.Evaluate(in, t0))
	}
	if n != 2*b.N {
		b.Fatalf("%d alerts over %d evaluations, want 2 each", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "inputs/s")
}
