package agent

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// rootsLookup answers records and the roots a store kept (RootLookup).
type rootsLookup struct {
	mapLookup
	roots map[string][]join.Process
}

func (l *rootsLookup) LookupRoots(_ context.Context, id string) ([]join.Process, error) {
	return l.roots[id], nil
}

// TestLookupRestoresRoots: a restarted agent (an empty joiner) sees the
// children of alice's root and of mallory's root, which reused alice's ID
// before the restart. The lookup hands back alice's record and both stored
// roots: alice's child is hers, mallory's child still is not. The control
// is the same agent with a lookup that keeps no roots.
func TestLookupRestoresRoots(t *testing.T) {
	id := "6a7f1a40-2f0e-4b8e-9a43-0c1d2e3f4a5c"
	t0 := time.Now().Add(-time.Minute)
	var rec auditlog.ExecRecord
	p, m := auditlog.NewParser(0), auditlog.NewMerger(auditlog.MergerConfig{})
	for _, ev := range p.ParseLine(execLine(id, "alice", t0, "ResponseStarted")) {
		if res := m.Add(ev); len(res.Updated) > 0 {
			rec = res.Updated[len(res.Updated)-1]
		}
	}
	rec.Namespace, rec.Pod, rec.Container = "kube-system", "etcd-0", "etcd"
	root := func(pid, user string, at time.Time) join.Process {
		r := join.Process{Exec: capture.Exec{ProcessID: pid, SessionRootID: pid, ContainerID: ctr, Argv: []string{"sh"}},
			Namespace: "kube-system", Pod: "etcd-0", Container: "etcd", Start: at, ExecTime: at, Source: vocab.SourceEnv}
		if user == "alice" {
			r.Attribution, r.AuditID = vocab.AttributionAuditID, id
		} else {
			r.ClaimedAuditID, r.Flags = id, []string{vocab.FlagAuditIDReused}
		}
		return r
	}
	stored := []join.Process{root("500-1", "alice", t0.Add(time.Second)), root("600-1", "mallory", t0.Add(10*time.Second))}
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprintf("roots=%v", keep), func(t *testing.T) {
			l := &rootsLookup{mapLookup: mapLookup{recs: map[string][]auditlog.ExecRecord{id: {rec}}}}
			var opt Option = WithAuditLookup(l, 1)
			if keep {
				l.roots = map[string][]join.Process{id: stored}
			} else {
				opt = WithAuditLookup(&l.mapLookup, 1)
			}
			a, st, w := startAgent(t, opt)
			ctx := context.Background()
			for _, c := range []struct{ pid, root string }{{"501-1", "500-1"}, {"601-1", "600-1"}} {
				ev := capture.Event{Exec: capture.Exec{ProcessID: c.pid, ParentProcessID: c.root, SessionRootID: c.root,
					Argv: []string{"id"}, ContainerID: ctr}, Kind: capture.KindExec, Time: time.Now(), AuditID: id, Source: vocab.SourceInherited}
				if err := a.Process(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}
			testutil.EventuallyNil(t, func() error {
				w.Flush(ctx)
				ps, _, err := st.ListProcesses(ctx, store.ProcessFilter{Limit: 10})
				if err != nil {
					return err
				}
				got := map[string]join.Process{}
				for _, p := range ps {
					got[p.ProcessID] = p
				}
				alice, mallory := got["501-1"], got["601-1"]
				if alice.AuditID != id || alice.Attribution != vocab.AttributionInherited {
					return fmt.Errorf("alice's child: %q %q, want inherited %s", alice.Attribution, alice.AuditID, id)
				}
				switch {
				case keep && (mallory.AuditID != "" || !slices.Contains(mallory.Flags, vocab.FlagAuditIDReused)):
					return fmt.Errorf("mallory's child: %q %q flags %v, want an audit_id_reused claim", mallory.Attribution, mallory.AuditID, mallory.Flags)
				case !keep && mallory.AuditID != id:
					return fmt.Errorf("control: mallory's child %q %q, want it taken for alice's without the roots", mallory.Attribution, mallory.AuditID)
				}
				return nil
			})
		})
	}
}
