package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// TestProcessBurst: a session's root and 600 children with their exits,
// handed over as one burst (three queue places: 256, 256, 88, the exits
// behind their execs), are joined and stored as the same events one by one
// are: every child attributed to the session, exited. The positive control
// is the one-by-one session beside it.
func TestProcessBurst(t *testing.T) {
	a, st, w := startAgentIn(t, staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}})
	ctx := context.Background()
	p := auditlog.NewParser(0)
	now := time.Now().UTC()
	const children = 600
	session := func(id string, pid int) []capture.Event {
		for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
			if err := a.AuditSink()(ctx, p.ParseLine(execLine(id, "alice", now, stage))); err != nil {
				t.Fatal(err)
			}
		}
		rootID := fmt.Sprintf("%d-1", pid)
		evs := []capture.Event{{Exec: capture.Exec{ProcessID: rootID, ParentProcessID: "90-1", PID: uint32(pid), PPID: 90,
			Argv: []string{"sh"}, ContainerID: ctr}, Kind: capture.KindExec, Time: now, AuditID: id, Source: vocab.SourceEnv}}
		code := 0
		for i := 1; i <= children; i++ {
			ex := capture.Exec{ProcessID: fmt.Sprintf("%d-1", pid+i), ParentProcessID: rootID, PID: uint32(pid + i),
				PPID: uint32(pid), Argv: []string{"/bin/true"}, ContainerID: ctr, SessionRootID: rootID}
			evs = append(evs, capture.Event{Exec: ex, Kind: capture.KindExec, Time: now, AuditID: id, Source: vocab.SourceInherited},
				capture.Event{Exec: ex, Kind: capture.KindExit, Time: now, ExitCode: &code})
		}
		return evs
	}
	burstID, singleID := testutil.RandomUUID(), testutil.RandomUUID()
	if err := a.ProcessBurst(ctx, session(burstID, 10000)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range session(singleID, 20000) {
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{singleID, burstID} {
		testutil.EventuallyNil(t, func() error {
			w.Flush(ctx)
			d, err := st.GetSession(ctx, id)
			if err != nil {
				return err
			}
			attributed := 0
			for _, pr := range d.Processes {
				if pr.AuditID == id && !pr.Exit.IsZero() && pr.Attribution == vocab.AttributionInherited {
					attributed++
				}
			}
			if attributed != children {
				return fmt.Errorf("session %s: %d of %d children stored attributed and exited", id, attributed, children)
			}
			return nil
		})
	}
}
