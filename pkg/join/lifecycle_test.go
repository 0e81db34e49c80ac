package join

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

func TestLateRecordAttributesStoredProcesses(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	snap.apply(j.AddProcess(t0.Add(time.Second), pr("r", "runc", idA, vocab.SourceEnv)))
	snap.apply(j.AddProcess(t0.Add(2*time.Second), pr("c", "r", idA, vocab.SourceInherited)))
	if got := snap.procs["r"]; got.Attribution != vocab.AttributionNone || got.AuditID != "" || got.ClaimedAuditID != idA {
		t.Fatalf("before the record: %+v", got)
	}
	if s := j.Stats(); s.Pending != 2 {
		t.Fatalf("pending = %d, want 2", s.Pending)
	}
	// Not yet past the TTL: nothing to say.
	if us := j.Expire(t0.Add(time.Minute)); len(us) != 0 {
		t.Fatalf("expire before the TTL emitted %d updates", len(us))
	}
	us := j.AddRecord(t0.Add(61*time.Second), xr(idA))
	snap.apply(us)
	if len(us) != 3 {
		t.Fatalf("late record: %d updates, want 2 processes and 1 session", len(us))
	}
	checkWant(t, "r", snap.procs["r"], want{attr: vocab.AttributionAuditID, auditID: idA})
	checkWant(t, "c", snap.procs["c"], want{attr: vocab.AttributionInherited, auditID: idA})
	s := snap.sessions[idA]
	if s.User.Username != "alice" {
		t.Fatalf("session: %+v", s)
	}
	if st := j.Stats(); st.Pending != 0 {
		t.Fatalf("pending = %d after the record, want 0", st.Pending)
	}
}

func TestTTLThenLateRecord(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	snap.apply(j.AddProcess(t0, pr("r", "runc", idA, vocab.SourceEnv)))
	snap.apply(j.Expire(t0.Add(DefaultPendingTTL)))
	checkWant(t, "r", snap.procs["r"], want{claimed: idA, flags: []string{vocab.FlagNoAuditRecord}})
	if st := j.Stats(); st.Expired != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The process is still held: a record arriving even later corrects it,
	// and says it came late, and by how much (from the process's start).
	snap.apply(j.AddRecord(t0.Add(7*time.Minute), xr(idA)))
	got := snap.procs["r"]
	checkWant(t, "r", got, want{attr: vocab.AttributionAuditID, auditID: idA, flags: []string{vocab.FlagLateAuditRecord}})
	if want := (7*time.Minute - time.Second).Seconds(); got.RecordDelay != want {
		t.Errorf("RecordDelay = %v, want %v", got.RecordDelay, want)
	}
	if st := j.Stats(); st.LateProcesses != 1 {
		t.Errorf("LateProcesses = %d, want 1", st.LateProcesses)
	}
}

func TestDeniedExecReplayed(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	rec := xr(idA)
	rec.Stages, rec.Code, rec.EndTimestamp = []string{auditlog.StageRequestReceived}, 0, time.Time{}
	snap.apply(j.AddRecord(t0, rec))
	snap.apply(j.AddProcess(t0.Add(time.Second), pr("r", "runc", idA, vocab.SourceEnv)))
	checkWant(t, "r", snap.procs["r"], want{attr: vocab.AttributionAuditID, auditID: idA})
	// The ResponseComplete stage says 403: whoever carries the ID replayed it.
	rec.Stages, rec.Code, rec.EndTimestamp = []string{auditlog.StageRequestReceived, auditlog.StageResponseComplete}, 403, t0
	snap.apply(j.AddRecord(t0.Add(2*time.Second), rec))
	checkWant(t, "r", snap.procs["r"], want{claimed: idA, flags: []string{vocab.FlagDeniedExec}})
	snap.apply(j.AddProcess(t0.Add(3*time.Second), pr("x", "r", idA, vocab.SourceInherited)))
	checkWant(t, "x", snap.procs["x"], want{claimed: idA, flags: []string{vocab.FlagDeniedExec}})
	if s := snap.sessions[idA]; s.Code != 403 || s.ProcessCount != 0 {
		t.Fatalf("session %+v", s)
	}
	// An older snapshot arriving late is ignored.
	rec.Stages, rec.Code = []string{auditlog.StageRequestReceived}, 0
	if us := j.AddRecord(t0.Add(4*time.Second), rec); len(us) != 0 || j.Stats().StaleRecords != 1 {
		t.Fatalf("stale snapshot: %d updates, stats %+v", len(us), j.Stats())
	}
}

func TestEvictionCounting(t *testing.T) {
	j := newJoiner(t, func(c *Config) { c.MaxProcesses, c.MaxRecords, c.MaxPending = 4, 2, 2 })
	snap := newSnapshot()
	for i := range 3 {
		snap.apply(j.AddRecord(t0, xr(fmt.Sprintf("rec-%d", i))))
	}
	for i := range 6 {
		snap.apply(j.AddProcess(t0, pr(fmt.Sprintf("p%d", i), "runc", fmt.Sprintf("orphan-%d", i), vocab.SourceEnv)))
	}
	for i := range 3 {
		snap.apply(j.AddExit(t0, Exit{ProcessID: fmt.Sprintf("never-%d", i), Time: t0}))
	}
	st := j.Stats()
	if st.EvictedRecords != 1 || st.Records != 2 {
		t.Errorf("records: evicted %d held %d, want 1 and 2", st.EvictedRecords, st.Records)
	}
	if st.EvictedProcesses != 2 || st.Processes != 4 {
		t.Errorf("processes: evicted %d held %d, want 2 and 4", st.EvictedProcesses, st.Processes)
	}
	if st.EvictedPending != 4 || st.Pending != 2 {
		t.Errorf("pending: evicted %d held %d, want 4 and 2", st.EvictedPending, st.Pending)
	}
	if st.EvictedExits != 1 {
		t.Errorf("exits: evicted %d, want 1", st.EvictedExits)
	}
	// Pushed out of the pending set early: flagged like a TTL expiry.
	checkWant(t, "p0", snap.procs["p0"], want{claimed: "orphan-0", flags: []string{vocab.FlagNoAuditRecord}})
	checkWant(t, "p5", snap.procs["p5"], want{claimed: "orphan-5"})
}

func TestExpireForgetsExitedProcessesButKeepsCounts(t *testing.T) {
	j := newJoiner(t, noLateWindow)
	snap := newSnapshot()
	snap.apply(j.AddRecord(t0, xr(idA)))
	snap.apply(j.AddProcess(t0, pr("r", "runc", idA, vocab.SourceEnv)))
	snap.apply(j.AddExit(t0, Exit{ProcessID: "c", Time: t0.Add(2 * time.Second), Code: 1})) // before its exec
	snap.apply(j.AddProcess(t0, pr("c", "r", idA, vocab.SourceInherited)))
	snap.apply(j.AddExit(t0, Exit{ProcessID: "r", Time: t0.Add(3 * time.Second)}))
	if c := snap.procs["c"]; c.ExitCode == nil || *c.ExitCode != 1 || !c.Exit.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("early exit not applied: %+v", c)
	}
	snap.apply(j.Expire(t0.Add(time.Hour)))
	st := j.Stats()
	if st.Processes != 0 || st.Records != 0 {
		t.Fatalf("after expiry: %+v", st)
	}
	if s, ok := j.Session(idA); ok {
		t.Fatalf("idle session still held: %+v", s)
	}
}

func TestReExecUnderSPOWebhook(t *testing.T) {
	// The SPO webhook rewrites the command to `env SPO_EXEC_REQUEST_UID=<uid> ls`:
	// one process, two images, the key only in the second.
	j := newJoiner(t)
	snap := newSnapshot()
	rec := xr(idA, "ls")
	rec.Annotations = map[string]string{"execmetadata.spo.io/" + vocab.SPOKey: "spo-1"}
	first := with(pr("r", "runc", "", ""), argv("env", vocab.SPOKey+"=spo-1", "ls"))
	second := with(first, func(p *Process) {
		p.Argv, p.ExecTime, p.SPO = []string{"ls"}, p.ExecTime.Add(time.Millisecond), capture.KeyValue{Value: "spo-1", Source: vocab.SourceEnv}
	})
	snap.apply(j.AddProcess(t0, first))
	snap.apply(j.AddRecord(t0, rec))
	// No answer while a second fitting record could still come.
	checkWant(t, "r", snap.procs["r"], want{})
	snap.apply(j.Expire(windowsClosed(t0)))
	checkWant(t, "r", snap.procs["r"], want{attr: vocab.AttributionHeuristic, auditID: idA, minConf: 0.8})
	snap.apply(j.AddProcess(t0, second))
	checkWant(t, "r", snap.procs["r"], want{attr: vocab.AttributionAuditID, auditID: idA})
	if got := snap.procs["r"]; !slices.Equal(got.Argv, []string{"ls"}) || got.SPOExecRequestUID != "spo-1" {
		t.Fatalf("re-exec kept %+v", got)
	}
}

func TestOutputJSON(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	snap.apply(j.AddRecord(t0, xr(idA)))
	snap.apply(j.AddProcess(t0, pr("r", "runc", idA, vocab.SourceEnv)))
	b, err := json.Marshal(Update{Process: new(snap.procs["r"])})
	if err != nil {
		t.Fatalf("encoding process: %v", err)
	}
	for _, k := range []string{`"processID":"r"`, `"attribution":"audit_id"`, `"auditID":"` + idA, `"flags":[]`, `"source":"env"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("process JSON lacks %s: %s", k, b)
		}
	}
	b, err = json.Marshal(snap.sessions[idA])
	if err != nil {
		t.Fatalf("encoding session: %v", err)
	}
	for _, k := range []string{`"user":{"username":"alice","groups":["dev"]}`, `"requestReceivedTimestamp"`, `"stages":[`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("session JSON lacks %s: %s", k, b)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.PendingTTL = 0 },
		func(c *Config) { c.HeuristicWindow = -1 },
		func(c *Config) { c.MaxPending = 0 },
		func(c *Config) { c.MaxRecords = -1 },
		func(c *Config) { c.MaxProcesses = 0 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", c, err)
		}
	}
}

func TestArgvScore(t *testing.T) {
	cases := []struct {
		argv, cmd []string
		file      string
		truncated bool
		want      float64
	}{
		{[]string{"ls", "-la"}, []string{"ls", "-la"}, "", false, scoreExact},
		{[]string{"/bin/ls", "-la"}, []string{"ls", "-la"}, "", false, scoreBasename},
		{[]string{"cat", "/very/lo"}, []string{"cat", "/very/long/path"}, "", true, scoreTruncated},
		{[]string{"ls"}, []string{"ls", "-la"}, "", false, scoreProgram},
		{[]string{"busybox"}, []string{"ls"}, "/bin/ls", false, scoreFilename},
		{[]string{"nginx"}, []string{"ls"}, "/usr/sbin/nginx", false, 0},
		{[]string{"env", vocab.SPOKey + "=u", "id"}, []string{"id"}, "", false, scoreExact},
		{[]string{"ls"}, nil, "", false, 0},
	}
	for _, tc := range cases {
		if got := argvScore(stripEnvPrefix(tc.argv), tc.file, tc.cmd, tc.truncated); got != tc.want {
			t.Errorf("argvScore(%q, %q) = %v, want %v", tc.argv, tc.cmd, got, tc.want)
		}
	}
}

func TestChildKeepsInheritanceAfterParentLeaves(t *testing.T) {
	j := newJoiner(t, noLateWindow)
	snap := newSnapshot()
	snap.apply(j.AddRecord(t0, xr(idA)))
	snap.apply(j.AddProcess(t0, pr("r", "runc", idA, vocab.SourceEnv)))
	snap.apply(j.AddProcess(t0, pr("u", "r", idA, vocab.SourceEnv, vocab.FlagRootUnverified)))
	snap.apply(j.AddProcess(t0, pr("c", "r", "", "", "lineage_full")))
	snap.apply(j.AddExit(t0, Exit{ProcessID: "r", Time: t0.Add(time.Second)}))
	snap.apply(j.Expire(t0.Add(time.Hour)))
	if _, ok := j.Process("r"); ok {
		t.Fatal("exited parent still held")
	}
	// A re-exec and a record update re-resolve both children without
	// their parent in memory.
	snap.apply(j.AddProcess(t0, with(pr("c", "r", "", "", "lineage_full"), argv("id"))))
	rec := xr(idA)
	rec.Annotations = map[string]string{"note": "later stage"}
	rec.Stages = append(rec.Stages, auditlog.StagePanic)
	snap.apply(j.AddRecord(t0.Add(time.Hour), rec))
	checkWant(t, "c", snap.procs["c"], want{attr: vocab.AttributionInherited, auditID: idA, flags: []string{"lineage_full"}})
	checkWant(t, "u", snap.procs["u"], want{attr: vocab.AttributionInherited, auditID: idA, flags: []string{vocab.FlagRootUnverified}})
}

func TestQueuesStayBounded(t *testing.T) {
	j := newJoiner(t)
	j.AddProcess(t0, pr("long-lived", "runc", idA, vocab.SourceEnv)) // heads every queue
	for i := range 20_000 {
		now := t0.Add(time.Duration(i) * time.Second)
		id := fmt.Sprint("p", i)
		j.AddRecord(now, xr(id))
		j.AddProcess(now, pr(id, "runc", id, vocab.SourceEnv))
		j.AddExit(now, Exit{ProcessID: id, Time: now})
		if i%100 == 0 {
			j.Expire(now)
		}
	}
	st := j.Stats()
	if st.Processes > 500 || st.Records > 500 {
		t.Fatalf("held %d processes, %d records", st.Processes, st.Records)
	}
	if n := j.procq.size(); n > 2*500+1024 {
		t.Errorf("process queue holds %d entries", n)
	}
	for name, q := range map[string]*queue{"exit": &j.exitq, "rec": &j.recq} {
		if q.size() > 2*500+1024 {
			t.Errorf("%s queue holds %d entries", name, q.size())
		}
	}
}

// TestShortSessionFlaggedBeforeForgotten: a session that exited within the
// TTL is flagged no_audit_record in the same Expire that forgets it.
func TestShortSessionFlaggedBeforeForgotten(t *testing.T) {
	j := newJoiner(t, noLateWindow)
	snap := newSnapshot()
	snap.apply(j.AddProcess(t0, pr("r", "runc", idA, vocab.SourceEnv)))
	snap.apply(j.AddExit(t0.Add(2*time.Second), Exit{ProcessID: "r", Time: t0.Add(2 * time.Second)}))
	snap.apply(j.Expire(t0.Add(DefaultPendingTTL + time.Minute)))
	checkWant(t, "r", snap.procs["r"], want{claimed: idA, flags: []string{vocab.FlagNoAuditRecord}})
	if st := j.Stats(); st.Processes != 0 {
		t.Fatalf("stats %+v: the exited process should be forgotten", st)
	}
}

// TestRootExecsInPlace: `kubectl exec -- sh -c '...; /bin/echo x'` runs
// echo in the root's own process, which reads the ID back from its lineage.
// It stays the session's root (audit_id) in either arrival order; a process
// the kernel could not verify as a root gains nothing from the same move
// (the control), and neither does a child that re-execs.
func TestRootExecsInPlace(t *testing.T) {
	root := pr("r", "runc", idA, vocab.SourceEnv)
	again := with(with(root, argv("/bin/echo", "x")), func(p *Process) {
		p.Captured.Source, p.ExecTime = vocab.SourceInherited, p.ExecTime.Add(time.Millisecond)
	})
	for name, order := range map[string][]Process{"root first": {root, again}, "re-exec first": {again, root}} {
		j := newJoiner(t)
		snap := newSnapshot()
		snap.apply(j.AddRecord(t0, xr(idA)))
		for _, p := range order {
			snap.apply(j.AddProcess(t0, p))
		}
		checkWant(t, name, snap.procs["r"], want{attr: vocab.AttributionAuditID, auditID: idA})
		if got := snap.procs["r"]; !slices.Equal(got.Argv, []string{"/bin/echo", "x"}) {
			t.Errorf("%s: argv %q, want the later image", name, got.Argv)
		}
	}

	// Control: an unverified root that re-execs stays unattributed.
	j := newJoiner(t)
	snap := newSnapshot()
	snap.apply(j.AddRecord(t0, xr(idA)))
	forged := pr("f", "runc", idA, vocab.SourceEnv, vocab.FlagRootUnverified)
	forgedAgain := with(with(forged, argv("/bin/echo", "x")), func(p *Process) {
		p.Captured.Source, p.Captured.Flags, p.ExecTime = vocab.SourceInherited, nil, p.ExecTime.Add(time.Millisecond)
	})
	snap.apply(j.AddProcess(t0, forged))
	snap.apply(j.AddProcess(t0, forgedAgain))
	if got := snap.procs["f"]; got.Attribution == vocab.AttributionAuditID {
		t.Errorf("an unverified root became the session's root by re-executing: %+v", got)
	}
}

// TestExitDueBeforeItsWaitIsStillFlagged: the pending TTL counts from when
// the joiner took the exec in (the agent reads the ring up to half a
// second late, later on a busy node), the forgetting of exited processes
// from the exit's kernel time. An exit that comes due first must not
// take its process away unflagged: its stored row would wait forever.
// The control, a process that does not exit, is flagged at its own TTL.
func TestExitDueBeforeItsWaitIsStillFlagged(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	seen := t0.Add(800 * time.Millisecond) // read from the ring 800 ms after the kernel's exec
	snap.apply(j.AddProcess(seen, pr("r", "runc", idA, vocab.SourceEnv)))
	snap.apply(j.AddProcess(seen, pr("c", "r", idA, vocab.SourceInherited)))
	snap.apply(j.AddProcess(seen, pr("live", "runc", idB, vocab.SourceEnv)))
	snap.apply(j.AddExit(seen, Exit{ProcessID: "c", Time: t0.Add(10 * time.Millisecond)}))
	snap.apply(j.AddExit(seen, Exit{ProcessID: "r", Time: t0.Add(20 * time.Millisecond)}))
	// The exits are past the TTL, the waits not yet.
	snap.apply(j.Expire(t0.Add(DefaultPendingTTL + 500*time.Millisecond)))
	for _, id := range []string{"r", "c"} {
		checkWant(t, id, snap.procs[id], want{claimed: idA, flags: []string{vocab.FlagNoAuditRecord}})
	}
	if p := snap.procs["live"]; slices.Contains(p.Flags, vocab.FlagNoAuditRecord) {
		t.Fatalf("running process flagged before its TTL: %v", p.Flags)
	}
	snap.apply(j.Expire(seen.Add(DefaultPendingTTL)))
	checkWant(t, "live", snap.procs["live"], want{claimed: idB, flags: []string{vocab.FlagNoAuditRecord}})
	if st := j.Stats(); st.Expired != 3 || st.Pending != 0 {
		t.Fatalf("stats %+v: want 3 expired, none pending", st)
	}
}
