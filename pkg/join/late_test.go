package join

import (
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// lateCase is a session whose processes all exited, the TTL passed and
// flagged them, and then its record came: each key kind the join reads.
type lateCase struct {
	name  string
	recs  []auditlog.ExecRecord
	procs []Process
	want  map[string]want // after the late record, the late flag aside
	// before is the flag a process had once the TTL passed.
	before map[string]string
}

// runLate plays c: the processes exec and exit at once, the TTL passes
// (Expire), and the record comes 10 minutes after t0. Then, as the
// in-time control, the same events with the record first.
func runLate(t *testing.T, c lateCase) {
	t.Helper()
	j := newJoiner(t)
	snap := newSnapshot()
	for _, p := range c.procs {
		snap.apply(j.AddProcess(t0.Add(2*time.Second), p))
		snap.apply(j.AddExit(t0.Add(3*time.Second), Exit{ProcessID: p.ProcessID, Time: t0.Add(3 * time.Second)}))
	}
	at := t0.Add(3*time.Second + DefaultPendingTTL + time.Second)
	snap.apply(j.Expire(at))
	for id, f := range c.before {
		if !slices.Contains(snap.procs[id].Flags, f) {
			t.Fatalf("%s: %s before the record: flags %v, want %s", c.name, id, snap.procs[id].Flags, f)
		}
	}
	arrive := t0.Add(10 * time.Minute)
	for _, r := range c.recs {
		snap.apply(j.AddRecord(arrive, r))
	}
	snap.apply(j.Expire(arrive.Add(time.Second)))
	for id, w := range c.want {
		got := snap.procs[id]
		if !slices.Contains(got.Flags, vocab.FlagLateAuditRecord) || got.RecordDelay <= DefaultPendingTTL.Seconds() {
			t.Errorf("%s: %s flags %v delay %v: want late_audit_record, later than the TTL", c.name, id, got.Flags, got.RecordDelay)
		}
		got.Flags = slices.DeleteFunc(got.Flags, func(f string) bool { return f == vocab.FlagLateAuditRecord })
		checkWant(t, id, got, w)
	}
	// In time: the record first, the same answer, nothing late.
	j, snap = newJoiner(t), newSnapshot()
	for _, r := range c.recs {
		snap.apply(j.AddRecord(t0.Add(time.Second), r))
	}
	for _, p := range c.procs {
		snap.apply(j.AddProcess(t0.Add(2*time.Second), p))
		snap.apply(j.AddExit(t0.Add(3*time.Second), Exit{ProcessID: p.ProcessID, Time: t0.Add(3 * time.Second)}))
	}
	snap.apply(j.Expire(at))
	for id, w := range c.want {
		checkWant(t, id+" in time", snap.procs[id], w)
	}
}

func TestJoinLateRecordEveryKey(t *testing.T) {
	spo := func(id, parent, v string, src vocab.Source) Process {
		return with(pr(id, parent, "", ""), func(p *Process) { p.SPO = capture.KeyValue{Value: v, Source: src} })
	}
	spoRec := rwith(xr(idB), func(r *auditlog.ExecRecord) {
		r.Annotations = map[string]string{"execmetadata.spo.io/" + vocab.SPOKey: "spo-late"}
	})
	alice := bridged(idA, bridgeA, "alice", t0)
	for _, c := range []lateCase{
		{
			name:   "audit ID key: root and child",
			recs:   []auditlog.ExecRecord{xr(idA)},
			procs:  []Process{pr("r", "runc", idA, vocab.SourceEnv), pr("c", "r", idA, vocab.SourceInherited)},
			before: map[string]string{"r": vocab.FlagNoAuditRecord, "c": vocab.FlagNoAuditRecord},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA},
				"c": {attr: vocab.AttributionInherited, auditID: idA},
			},
		},
		{
			name:   "SPO_EXEC_REQUEST_UID through the webhook's annotation",
			recs:   []auditlog.ExecRecord{spoRec},
			procs:  []Process{spo("r", "runc", "spo-late", vocab.SourceEnv), spo("c", "r", "spo-late", vocab.SourceInherited)},
			before: map[string]string{"r": vocab.FlagNoAuditRecord, "c": vocab.FlagNoAuditRecord},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idB},
				"c": {attr: vocab.AttributionInherited, auditID: idB},
			},
		},
		{
			name:   "the exec bridge's ID",
			recs:   []auditlog.ExecRecord{alice},
			procs:  []Process{broot("r", bridgeA, time.Second), bchild("c", "r", bridgeA)},
			before: map[string]string{"r": vocab.FlagNoAuditRecord},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{vocab.FlagBridgeArgv}},
				"c": {attr: vocab.AttributionInherited, auditID: idA},
			},
		},
		{
			// The VM guest's case: alice's record read after the TTL must
			// still make a copy of her bridge ID a reuse, not nobody's.
			name: "an uncovered exec carrying a copy of alice's bridge ID",
			recs: []auditlog.ExecRecord{alice},
			procs: []Process{
				with(broot("ra", bridgeA, time.Second), func(p *Process) { p.ExecOrigin = capture.OriginOtherCgroup }),
				with(broot("rx", bridgeA, 4*time.Second), func(p *Process) { p.ExecOrigin = capture.OriginOtherCgroup }),
			},
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{vocab.FlagBridgeArgv}},
				// A reused root waits for a request of its own: none came.
				"rx": {claimed: idA, flags: []string{vocab.FlagAuditIDReused, vocab.FlagBridgeArgv, vocab.FlagNoAuditRecord}},
			},
		},
		{
			name:   "an ID-less root flagged uncovered_exec: the heuristic re-decides it",
			recs:   []auditlog.ExecRecord{xr(idC)},
			procs:  []Process{plainRoot("x", time.Second, capture.OriginOtherCgroup), pr("xc", "x", "", "")},
			before: map[string]string{"x": vocab.FlagUncoveredExec},
			want: map[string]want{
				"x":  {attr: vocab.AttributionHeuristic, auditID: idC, minConf: 0.9},
				"xc": {attr: vocab.AttributionHeuristic, auditID: idC, minConf: 0.9},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) { runLate(t, c) })
	}
}

// TestJoinLateWindowEnds: a record later than the late window finds
// nothing held: the stored rows keep what was said, and the loss is
// counted (Stats.LateForgotten). Control: within the window it attributes.
func TestJoinLateWindowEnds(t *testing.T) {
	for _, within := range []bool{true, false} {
		j := newJoiner(t, func(c *Config) { c.LateWindow = 20 * time.Minute })
		snap := newSnapshot()
		snap.apply(j.AddProcess(t0.Add(2*time.Second), pr("r", "runc", idA, vocab.SourceEnv)))
		snap.apply(j.AddExit(t0.Add(3*time.Second), Exit{ProcessID: "r", Time: t0.Add(3 * time.Second)}))
		arrive := t0.Add(30 * time.Minute)
		if within {
			arrive = t0.Add(15 * time.Minute)
		}
		for at := t0; at.Before(arrive); at = at.Add(time.Minute) {
			snap.apply(j.Expire(at))
		}
		snap.apply(j.AddRecord(arrive, xr(idA)))
		got, st := snap.procs["r"], j.Stats()
		switch {
		case within && (got.Attribution != vocab.AttributionAuditID || st.LateKept != 1 || st.LateForgotten != 0):
			t.Errorf("within the window: %q flags %v, stats %+v", got.Attribution, got.Flags, st)
		case !within && (got.Attribution != vocab.AttributionNone || !slices.Contains(got.Flags, vocab.FlagNoAuditRecord) || st.LateForgotten != 1):
			t.Errorf("past the window: %q flags %v, stats %+v: want no_audit_record kept and one forgotten", got.Attribution, got.Flags, st)
		}
	}
}

// TestJoinContainerProcessesLeaveAtTTL: a container's own processes (no
// ID, not an exec root's lineage) are forgotten at the TTL as before; only
// exec sessions' stay.
func TestJoinContainerProcessesLeaveAtTTL(t *testing.T) {
	j := newJoiner(t)
	initp := with(pr("init", "shim", "", ""), func(p *Process) { p.ExecOrigin = capture.OriginContainerInit; p.Start = t0.Add(-time.Hour) })
	j.AddProcess(t0, initp)
	j.AddProcess(t0.Add(time.Second), pr("w", "init", "", ""))
	j.AddProcess(t0.Add(time.Second), pr("s", "runc", idA, vocab.SourceEnv))
	for _, id := range []string{"w", "s"} {
		j.AddExit(t0.Add(2*time.Second), Exit{ProcessID: id, Time: t0.Add(2 * time.Second)})
	}
	j.Expire(t0.Add(2*time.Second + DefaultPendingTTL + time.Second))
	if _, ok := j.Process("w"); ok {
		t.Error("the container's own process is still held past the TTL")
	}
	if _, ok := j.Process("s"); !ok {
		t.Error("the exec session's process was forgotten at the TTL (control)")
	}
}
