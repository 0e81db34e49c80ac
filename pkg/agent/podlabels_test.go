package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/meta"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// labelRules: two rules on the pod label app=payments, one per scope, and
// two that match every process and every session of alice, so that the
// test knows when an input it expects no label alert for was evaluated.
const labelRules = `
rules:
  - name: payments-exec
    severity: high
    scope: process
    message: "exec of $(filename) in $(namespace)/$(pod), app $(label.app)"
    match:
      labels: {app: payments}
  - name: payments-session
    severity: high
    scope: session
    message: "$(user) opened a session in app $(label.app)"
    match:
      user: alice
      labels: {app: [payments, "pay-*"]}
  - name: every-exec
    severity: info
    scope: process
    message: "$(processID)"
    match:
      filename: "*"
  - name: every-session
    severity: info
    scope: session
    message: "$(auditID)"
    match:
      user: alice
`

func (r *recordingOutlet) byRule(rule string) []store.Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Alert
	for _, a := range r.alerts {
		if a.Rule == rule {
			out = append(out, a)
		}
	}
	return out
}

// keys are the alerts' process IDs, or audit IDs for session alerts,
// sorted.
func keys(as []store.Alert) []string {
	var out []string
	for _, a := range as {
		k := a.ProcessID
		if k == "" {
			k = a.AuditID
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestPodLabelRules: the labels pkg/meta resolves for a process's pod
// reach the rules, for the process and for a session into that pod; a pod
// with another value of the label, or with no labels, raises nothing.
func TestPodLabelRules(t *testing.T) {
	rules, err := alert.ParseRules([]byte(labelRules))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := alert.NewEngine(rules, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const (
		ctrPay   = "1111111111111111111111111111111111111111111111111111111111111111"
		ctrWeb   = "2222222222222222222222222222222222222222222222222222222222222222"
		ctrPlain = "3333333333333333333333333333333333333333333333333333333333333333"
	)
	res := staticMeta{
		ctrPay:   {ContainerID: ctrPay, Namespace: "shop", Pod: "pay-0", Container: "app", Labels: map[string]string{"app": "payments", "team": "billing"}},
		ctrWeb:   {ContainerID: ctrWeb, Namespace: "shop", Pod: "web-0", Container: "app", Labels: map[string]string{"app": "web"}},
		ctrPlain: {ContainerID: ctrPlain, Namespace: "shop", Pod: "plain-0", Container: "app"},
	}
	out := &recordingOutlet{}
	a, _, _ := startAgentIn(t, res, WithAlerts(eng, out))
	ctx := context.Background()

	// Processes of sessions whose records never come: process inputs
	// alone. Their own IDs keep the joiner from giving them to the
	// sessions below by pod (heuristic attribution), which would evaluate
	// those sessions with a process and its labels.
	for i, c := range []struct{ pid, ctr string }{{"pay", ctrPay}, {"web", ctrWeb}, {"plain", ctrPlain}} {
		ev := capture.Event{Exec: capture.Exec{ProcessID: c.pid + "-1", ParentProcessID: "1-1",
			PID: uint32(100 + i), PPID: 1, Filename: "/bin/sh", Argv: []string{"sh"}, ContainerID: c.ctr}, Kind: capture.KindExec, Time: time.Now(),

			AuditID: "b0000000-0000-4000-8000-00000000000" + string(rune('1'+i)), Source: vocab.SourceEnv}
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "every process evaluated", func() bool {
		return slices.Equal(keys(out.byRule("every-exec")), []string{"pay-1", "plain-1", "web-1"})
	})
	pay := out.byRule("payments-exec")
	if got := keys(pay); !slices.Equal(got, []string{"pay-1"}) {
		t.Fatalf("payments-exec fired for %v, want only the process in the app=payments pod", got)
	}
	if want := "exec of /bin/sh in shop/pay-0, app payments"; pay[0].Message != want {
		t.Errorf("message %q, want %q", pay[0].Message, want)
	}
	if !strings.Contains(string(pay[0].Payload), `"labels":{"app":"payments","team":"billing"}`) {
		t.Errorf("payload %s does not carry the pod's labels", pay[0].Payload)
	}

	// Sessions with no process of theirs: session inputs alone, whose pod
	// is known only by name, from the audit record.
	sessions := map[string]string{ // audit ID -> pod
		"a0000000-0000-4000-8000-000000000001": "pay-0",
		"a0000000-0000-4000-8000-000000000002": "web-0",
		"a0000000-0000-4000-8000-000000000003": "plain-0",
		"a0000000-0000-4000-8000-000000000004": "elsewhere-0", // no process of it on this node
	}
	p := auditlog.NewParser(0)
	for id, pod := range sessions {
		req := testutil.ExecRequest{AuditID: id, User: "alice", Namespace: "shop", Pod: pod, Container: "app",
			Command: []string{"sh"}, Received: time.Now(), Duration: time.Second}
		var evs []auditlog.Event
		for line := range strings.Lines(string(req.LogLines())) {
			evs = append(evs, p.ParseLine([]byte(line))...)
		}
		if err := a.AuditSink()(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "every session evaluated", func() bool {
		return slices.Equal(keys(out.byRule("every-session")), slices.Sorted(maps.Keys(sessions)))
	})
	paySession := out.byRule("payments-session")
	if got := keys(paySession); !slices.Equal(got, []string{"a0000000-0000-4000-8000-000000000001"}) {
		t.Fatalf("payments-session fired for %v, want only the session into the app=payments pod", got)
	}
	if want := "alice opened a session in app payments"; paySession[0].Message != want {
		t.Errorf("message %q, want %q", paySession[0].Message, want)
	}
}

// TestPodLabelRulesProcessOverSession: a process in a session is evaluated
// with its own pod's labels, and with its session's pod's when its own are
// unknown (a process the runtime could not name).
func TestPodLabelRulesProcessOverSession(t *testing.T) {
	c := newPodLabelCache(8, 1<<20)
	c.set(&meta.Info{Namespace: "shop", Pod: "pay-0", Labels: map[string]string{"app": "payments"}})
	c.set(&meta.Info{Namespace: "shop", Pod: "web-0", Labels: map[string]string{"app": "web"}})
	eng := &labelSpy{}
	a := &Agent{alerter: eng, labels: c}
	sess := join.Session{ExecRecord: auditlog.ExecRecord{AuditID: "s1", Namespace: "shop", Pod: "pay-0"}}
	b := store.Batch{Sessions: []join.Session{sess}, Processes: []join.Process{
		{Exec: capture.Exec{ProcessID: "own"}, AuditID: "s1", Namespace: "shop", Pod: "web-0"},
		{Exec: capture.Exec{ProcessID: "unnamed"}, AuditID: "s1"},
		{Exec: capture.Exec{ProcessID: "claimant"}, ClaimedAuditID: "s1"},
	}}
	a.evaluate(&b, time.Now())
	want := map[string]string{"session": "payments", "own": "web", "unnamed": "payments", "claimant": ""}
	if !maps.Equal(eng.apps, want) {
		t.Errorf("app label seen per input %v, want %v", eng.apps, want)
	}
}

// labelSpy records the app label of every input it evaluates, by
// process ID ("session" for a session alone).
type labelSpy struct{ apps map[string]string }

func (r *labelSpy) Evaluate(in alert.Input, _ time.Time) []store.Alert {
	if r.apps == nil {
		r.apps = map[string]string{}
	}
	k := "session"
	if in.Process != nil {
		k = in.Process.ProcessID
	}
	r.apps[k] = in.Labels["app"]
	return nil
}

func TestPodLabelCacheBounds(t *testing.T) {
	info := func(pod string, labels ...string) *meta.Info {
		l := map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			l[labels[i]] = labels[i+1]
		}
		return &meta.Info{Namespace: "ns", Pod: pod, Labels: l}
	}
	small := podLabelBytes(podKey{"ns", "p0"}, map[string]string{"app": "x"})

	t.Run("count", func(t *testing.T) {
		c := newPodLabelCache(2, 1<<20)
		c.set(info("p0", "app", "a"))
		c.set(info("p1", "app", "b"))
		c.get("ns", "p0") // p1 is now the least recently used
		c.set(info("p2", "app", "c"))
		if c.get("ns", "p1") != nil || c.get("ns", "p0")["app"] != "a" || c.get("ns", "p2")["app"] != "c" || c.shed() != 1 {
			t.Errorf("after a third pod: p0 %v p1 %v p2 %v, shed %d; want p1 out, 1 shed",
				c.get("ns", "p0"), c.get("ns", "p1"), c.get("ns", "p2"), c.shed())
		}
	})
	t.Run("bytes", func(t *testing.T) {
		c := newPodLabelCache(100, 3*small)
		for _, p := range []string{"p0", "p1", "p2"} {
			c.set(info(p, "app", "x"))
		}
		if c.shed() != 0 || c.bytes != 3*small {
			t.Fatalf("three small pods: shed %d, bytes %d; want 0, %d", c.shed(), c.bytes, 3*small)
		}
		c.set(info("p3", "app", "x"))
		if c.get("ns", "p0") != nil || c.get("ns", "p3") == nil || c.shed() != 1 || c.bytes != 3*small {
			t.Errorf("a fourth: p0 %v p3 %v, shed %d, bytes %d; want p0 out, 1 shed, %d", c.get("ns", "p0"),
				c.get("ns", "p3"), c.shed(), c.bytes, 3*small)
		}
		c.set(info("huge", "app", strings.Repeat("x", 4*small)))
		if c.get("ns", "huge") != nil || c.shed() != 2 || c.lru.Len() != 3 {
			t.Errorf("a pod over the whole bound: kept %v, shed %d, %d pods; want not kept, 2 shed, 3 pods",
				c.get("ns", "huge") != nil, c.shed(), c.lru.Len())
		}
	})
	t.Run("replace and forget", func(t *testing.T) {
		c := newPodLabelCache(10, 1<<20)
		c.set(info("p0", "app", "a"))
		c.set(info("p0", "app", "b", "team", "t"))
		if got := c.get("ns", "p0"); got["app"] != "b" || c.bytes != podLabelBytes(podKey{"ns", "p0"}, got) {
			t.Errorf("replaced: %v, bytes %d", got, c.bytes)
		}
		c.set(&meta.Info{Namespace: "ns", Pod: "p0"}) // recreated without labels
		c.set(&meta.Info{PodUID: "u", Labels: map[string]string{"app": "x"}})
		if c.get("ns", "p0") != nil || c.bytes != 0 || c.lru.Len() != 0 || c.shed() != 0 {
			t.Errorf("forgotten: %v, bytes %d, %d pods, shed %d; want nothing, nothing shed",
				c.get("ns", "p0"), c.bytes, c.lru.Len(), c.shed())
		}
	})
	t.Run("nil", func(t *testing.T) {
		var c *podLabelCache
		c.set(info("p0", "app", "a"))
		if c.get("ns", "p0") != nil || c.shed() != 0 {
			t.Error("a nil cache kept something")
		}
	})
}

// TestPodLabelLossExported: pods the label cache sheds show in
// correlator_join_evicted_total{kind="pod_labels"}.
func TestPodLabelLossExported(t *testing.T) {
	cfg := Default()
	cfg.ExpireEvery = 10 * time.Millisecond
	cfg.MaxPodLabels = 1
	reg := prometheus.NewPedanticRegistry()
	res := staticMeta{}
	for i, pod := range []string{"a-0", "b-0", "c-0"} {
		id := strings.Repeat(string(rune('a'+i)), 64)
		res[id] = meta.Info{ContainerID: id, Namespace: "shop", Pod: pod, Labels: map[string]string{"app": pod}}
	}
	a, err := New(cfg, res, nopSink{}, zerolog.Nop(), reg, WithAlerts(&labelSpy{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	for id := range res {
		ev := capture.Event{Exec: capture.Exec{ProcessID: id[:4] + "-1", PID: 10, PPID: 1,
			ContainerID: id}, Kind: capture.KindExec, Time: time.Now(),
			Source: vocab.SourceEnv}
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyNil(t, func() error {
		mfs, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "correlator_join_evicted_total" && len(m.GetLabel()) == 1 &&
					m.GetLabel()[0].GetValue() == "pod_labels" {
					if v := m.GetCounter().GetValue(); v != 2 {
						return fmt.Errorf("pod_labels evictions %v, want 2", v)
					}
					return nil
				}
			}
		}
		return errors.New("no correlator_join_evicted_total{kind=\"pod_labels\"}")
	})
}
