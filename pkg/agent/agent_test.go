package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/meta"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// staticMeta maps every container to one pod, as a --pod-map would.
type staticMeta map[string]meta.Info

func (m staticMeta) Resolve(_ context.Context, id, _ string) (meta.Info, bool, error) {
	i, ok := m[id]
	return i, ok, nil
}

const ctr = "e9ca6c735a0994f93161425d1427358d528435f4f8aba3373d3a2c77d10dc584"

func execLine(id, user string, at time.Time, stage string) []byte {
	return []byte(fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":%q,`+
		`"requestURI":"/api/v1/namespaces/shop/pods/web-0/exec?command=sh\u0026container=app\u0026stdin=true","verb":"get",`+
		`"user":{"username":%q,"groups":["sre","system:authenticated"]},"sourceIPs":["10.0.0.7"],`+
		`"objectRef":{"resource":"pods","namespace":"shop","name":"web-0","apiVersion":"v1","subresource":"exec"},`+
		`"responseStatus":{"metadata":{},"code":101},"requestReceivedTimestamp":%q,"stageTimestamp":%q,`+
		`"annotations":{"authorization.k8s.io/decision":"allow"}}`,
		id, stage, user, at.UTC().Format("2006-01-02T15:04:05.000000Z"), at.UTC().Format("2006-01-02T15:04:05.000000Z")))
}

// TestPipelineBothOrders feeds one session's processes and audit record in
// both orders through the real SQLite writer and checks the stored result.
func TestPipelineBothOrders(t *testing.T) {
	for _, auditFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("auditFirst=%v", auditFirst), func(t *testing.T) {
			st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			w := store.NewWriter(st, 100, 10*time.Millisecond)
			cfg := Default()
			cfg.ExpireEvery = 10 * time.Millisecond
			a, err := New(cfg, staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}}, w, zerolog.Nop(), nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- a.Run(ctx) }()

			id := "5e1c2a7d-93b4-4f0e-8a51-2c6d7e8f9a01"
			now := time.Now().UTC()
			p := auditlog.NewParser(0)
			audit := func() {
				for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
					if err := a.AuditSink()(ctx, p.ParseLine(execLine(id, "alice", now, stage))); err != nil {
						t.Fatal(err)
					}
				}
			}
			procs := func() {
				root := capture.Event{Exec: capture.Exec{ProcessID: "100-1", ParentProcessID: "90-1", PID: 100, PPID: 90,
					Argv: []string{"sh"}, ContainerID: ctr}, Kind: capture.KindExec, Time: now,
					AuditID: id, Source: vocab.SourceEnv, Flags: []string{}}
				child := capture.Event{Exec: capture.Exec{ProcessID: "101-1", ParentProcessID: "100-1", PID: 101, PPID: 100,
					Argv: []string{"cat", "/etc/shadow"}, ContainerID: ctr,
					SessionRootID: "100-1"}, Kind: capture.KindExec, Time: now,
					AuditID: id, Source: vocab.SourceInherited,
					Flags: []string{vocab.FlagEnvRemoved}}
				for _, ev := range []capture.Event{root, child} {
					if err := a.Process(ctx, ev); err != nil {
						t.Fatal(err)
					}
				}
			}
			if auditFirst {
				audit()
				procs()
			} else {
				procs()
				audit()
			}
			var d store.SessionDetail
			testutil.EventuallyNil(t, func() error {
				w.Flush(ctx)
				var err error
				d, err = st.GetSession(ctx, id)
				if err == nil && len(d.Processes) == 2 && d.Processes[1].Attribution != "" {
					return nil
				}
				return fmt.Errorf("session not stored and attributed: %+v %v", d, err)
			})
			cancel()
			<-done
			w.Close()
			if n := promtestutil.ToFloat64(a.events.WithLabelValues("exec")); n != 2 {
				t.Errorf("%v exec events counted, want 2", n)
			}
			if d, err = st.GetSession(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			if d.User.Username != "alice" || d.Pod != "web-0" {
				t.Errorf("session %+v", d.Session)
			}
			var stages []string
			for _, r := range d.AuditRecords {
				if strings.Contains(string(r.Event), `"auditID":"`+id) {
					stages = append(stages, r.Stage)
				}
			}
			slices.Sort(stages)
			if !slices.Equal(stages, []string{"ResponseComplete", "ResponseStarted"}) {
				t.Errorf("audit records %+v: want both stages, kept", d.AuditRecords)
			}
			got := map[string]join.Process{}
			for _, p := range d.Processes {
				got[p.ProcessID] = p
			}
			if got["100-1"].Attribution != "audit_id" || got["101-1"].Attribution != "inherited" {
				t.Errorf("attribution root=%q child=%q", got["100-1"].Attribution, got["101-1"].Attribution)
			}
			if fl := got["101-1"].Flags; len(fl) == 0 || fl[0] != vocab.FlagEnvRemoved {
				t.Errorf("child flags %v", fl)
			}
		})
	}
}
