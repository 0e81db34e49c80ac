package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// A record on its way is not looked up: alice's comes through the sources
// within the delay, bob's never does. Only bob's ID is asked for, and only
// once the delay is over; bob's lookup is also the control that the due
// IDs were read at all.
func TestLookupWaitsForTheRecord(t *testing.T) {
	const alice, bob = "0b5e1c8a-0000-4000-8000-0000000000a1", "0b5e1c8a-0000-4000-8000-0000000000b0"
	clock := newFakeClock()
	l := &mapLookup{recs: map[string][]auditlog.ExecRecord{}}
	a, st, w := startAgentWith(t, staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}},
		func(c *Config) { c.LookupDelay = DefaultLookupDelay }, clock.Now, WithAuditLookup(l, 1))
	ctx := context.Background()
	for i, id := range []string{alice, bob} {
		pid := uint32(400 + i)
		ev := capture.Event{Exec: capture.Exec{ProcessID: id[len(id)-2:] + "-1", PID: pid, PPID: 1, Argv: []string{"sh"},
			ContainerID: ctr, SessionRootID: id[len(id)-2:] + "-1"},
			Kind: capture.KindExec, Time: clock.Now(), AuditID: id, Source: vocab.SourceEnv}
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	// Both wait out the delay (the agent wants their lookups as it emits
	// their rows); then alice's record comes.
	stored := func(attributed int) func() bool {
		return func() bool {
			ps, _, err := st.ListProcesses(ctx, store.ProcessFilter{Limit: 10})
			n := 0
			for _, p := range ps {
				if p.AuditID != "" {
					n++
				}
			}
			return err == nil && len(ps) == 2 && n == attributed
		}
	}
	waitFor(t, w, stored(0))
	p := auditlog.NewParser(0)
	for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
		if err := a.AuditSink()(ctx, p.ParseLine(execLine(alice, "alice", clock.Now(), stage))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, w, stored(1))
	l.mu.Lock()
	early := slices.Clone(l.asked)
	l.mu.Unlock()
	if len(early) != 0 {
		t.Fatalf("looked up %v within the delay", early)
	}
	clock.Advance(DefaultLookupDelay + time.Second)
	testutil.Eventually(t, "bob's ID looked up after the delay", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return slices.Contains(l.asked, bob)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if slices.Contains(l.asked, alice) {
		t.Errorf("looked up %v: alice's record had come", l.asked)
	}
}
