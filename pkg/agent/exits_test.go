package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// A process whose exit comes after its row was committed is written as an
// exit alone (store.Batch.Exits) through the real SQLite writer, and the
// stored row ends as the row before with the exit: attribution, flags and
// argv as they were. Control: the row was stored before, without an exit.
func TestExitAfterCommitStoredAlone(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	exitsAlone := 0
	var trail []string
	w := store.NewWriter(st, 100, 10*time.Millisecond, store.WithCommitHook(func(b store.Batch, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			exitsAlone += len(b.Exits)
			for _, p := range b.Processes {
				trail = append(trail, fmt.Sprintf("whole %s attr=%s exit=%v flags=%v", p.ProcessID, p.Attribution, p.Exit, p.Flags))
			}
			for _, p := range b.Exits {
				trail = append(trail, "alone "+p.ProcessID)
			}
		}
	}))
	defer w.Close()
	a, err := New(Default(), staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}}, w, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	id := "0b7d3c1e-5f2a-4e8b-9c6d-1a2b3c4d5e6f"
	now := time.Now().UTC()
	p := auditlog.NewParser(0)
	for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
		if err := a.AuditSink()(ctx, p.ParseLine(execLine(id, "alice", now, stage))); err != nil {
			t.Fatal(err)
		}
	}
	root := capture.Event{Exec: capture.Exec{ProcessID: "200-1", ParentProcessID: "90-1", PID: 200, PPID: 90,
		Argv: []string{"sh"}, ContainerID: ctr}, Kind: capture.KindExec, Time: now,
		AuditID: id, Source: vocab.SourceEnv, Flags: []string{}}
	child := capture.Event{Exec: capture.Exec{ProcessID: "201-1", ParentProcessID: "200-1", PID: 201, PPID: 200,
		Argv: []string{"cat", "/etc/shadow"}, ContainerID: ctr, SessionRootID: "200-1"}, Kind: capture.KindExec,
		Time: now, AuditID: id, Source: vocab.SourceInherited, Flags: []string{vocab.FlagEnvRemoved}}
	for _, ev := range []capture.Event{root, child} {
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(exited bool) map[string]join.Process {
		var got map[string]join.Process
		testutil.EventuallyNil(t, func() error {
			d, err := st.GetSession(ctx, id)
			if err != nil {
				return err
			}
			got = map[string]join.Process{}
			for _, p := range d.Processes {
				if p.Attribution != "" && p.Exit.IsZero() != exited {
					got[p.ProcessID] = p
				}
			}
			if len(got) != 2 {
				return fmt.Errorf("%d of 2 processes stored attributed with exited=%v", len(got), exited)
			}
			return nil
		})
		return got
	}
	before := stored(false) // the control: stored, running
	code := 3
	for _, ev := range []capture.Event{root, child} {
		ev.Kind, ev.Time, ev.ExitCode = capture.KindExit, now.Add(2*time.Second), &code
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	after := stored(true)
	// The hook runs after the commit a reader sees: Flush waits for it.
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for id, p := range after {
		want := before[id]
		want.Exit, want.ExitCode = p.Exit, p.ExitCode
		if p.ExitCode == nil || *p.ExitCode != code {
			t.Errorf("%s: exit code %v, want %d", id, p.ExitCode, code)
		}
		sameProcess(t, id, p, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if exitsAlone != 2 {
		t.Fatalf("%d exits committed alone, want 2:\n%s", exitsAlone, strings.Join(trail, "\n"))
	}
}

func sameProcess(t *testing.T, id string, got, want join.Process) {
	t.Helper()
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
		t.Errorf("%s stored\n%s\nwant the row before with its exit\n%s", id, g, w)
	}
}
