package join

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

func denied(r *auditlog.ExecRecord) {
	r.Stages = []string{auditlog.StageRequestReceived, auditlog.StageResponseComplete}
	r.Code, r.Decision = 403, "forbid"
}

// TestHeldBytesReturnToZero: whatever was held, shared strings included,
// is given back once records and processes are forgotten.
func TestHeldBytesReturnToZero(t *testing.T) {
	j := newJoiner(t, noLateWindow)
	for i := range 50 {
		id := fmt.Sprintf("rec-%d", i)
		r := xr(id)
		r.Stages = r.Stages[:1]
		r.Annotations = map[string]string{"authorization.k8s.io/decision": "allow", "i": fmt.Sprint(i % 3)}
		if i%5 == 0 {
			r.ImpersonatedUser = &auditlog.UserInfo{Username: "bob", Groups: []string{"ops"}}
		}
		if i%7 == 0 {
			r.UserAgent = strings.Repeat("x", 2*internMaxLen) // too long to share
		}
		j.AddRecord(t0, r)
		j.AddRecord(t0, xr(id)) // the complete stages replace it
		if i%4 == 0 {
			denied(&r)
			r.RequestURI += "&other" // a second request under the ID
			j.AddRecord(t0, r)
		}
		j.AddProcess(t0, pr(fmt.Sprintf("p%d", i), "runc", id, vocab.SourceEnv))
		j.AddExit(t0, Exit{ProcessID: fmt.Sprintf("p%d", i), Time: t0})
	}
	if st := j.Stats(); st.RecordBytes <= 0 || st.ProcessBytes <= 0 {
		t.Fatalf("nothing charged: %+v", st)
	}
	j.Expire(t0.Add(time.Hour))
	st := j.Stats()
	if st.Records != 0 || st.RecordBytes != 0 || st.DeniedRecords != 0 || st.Processes != 0 || st.ProcessBytes != 0 {
		t.Fatalf("after forgetting everything: %+v", st)
	}
	if len(j.intern.m) != 0 {
		t.Fatalf("interner still holds %d values", len(j.intern.m))
	}
}

// TestDeniedFloodSparesAllowedRecords: refused requests, which anyone
// authenticated can make, churn only their own bounded set; the newest are
// still there to flag a replay.
func TestDeniedFloodSparesAllowedRecords(t *testing.T) {
	j := newJoiner(t, func(c *Config) { c.MaxDeniedRecords = 8 })
	snap := newSnapshot()
	j.AddRecord(t0, xr(idA))
	var last string
	for i := range 100 {
		r := xr(fmt.Sprintf("denied-%d", i))
		denied(&r)
		snap.apply(j.AddRecord(t0, r))
		last = r.AuditID
	}
	st := j.Stats()
	if st.DeniedRecords != 8 || st.EvictedDenied != 92 || st.EvictedRecords != 0 || st.Records != 9 {
		t.Fatalf("stats %+v: want 8 refused held, 92 shed, the allowed one kept", st)
	}
	if s := snap.sessions["denied-0"]; s.Code != 403 {
		t.Fatalf("a refused record shed later was still emitted first: %+v", s)
	}
	snap.apply(j.AddProcess(t0, pr("r", "runc", idA, vocab.SourceEnv)))
	checkWant(t, "r", snap.procs["r"], want{attr: vocab.AttributionAuditID, auditID: idA})
	snap.apply(j.AddProcess(t0, pr("x", "runc", last, vocab.SourceEnv)))
	checkWant(t, "x", snap.procs["x"], want{claimed: last, flags: []string{vocab.FlagDeniedExec}})
}

// TestRecordBytesBound: a flood of distinct records stays within
// MaxRecordBytes by shedding the oldest idle ones; a record a running
// process is attributed to, and the newest, keep attributing.
func TestRecordBytesBound(t *testing.T) {
	const limit = 256 << 10
	j := newJoiner(t, func(c *Config) { c.MaxRecordBytes = limit })
	snap := newSnapshot()
	snap.apply(j.AddRecord(t0, xr(idA)))
	snap.apply(j.AddProcess(t0, pr("live", "runc", idA, vocab.SourceEnv)))
	for i := range 2000 {
		r := xr(fmt.Sprintf("flood-%d", i), "sh", "-c", strings.Repeat("y", i%300))
		snap.apply(j.AddRecord(t0, r))
		if st := j.Stats(); st.RecordBytes > limit {
			t.Fatalf("record %d: %d bytes held, bound %d", i, st.RecordBytes, limit)
		}
	}
	st := j.Stats()
	if st.EvictedRecords == 0 || st.Records >= 2000 {
		t.Fatalf("nothing shed: %+v", st)
	}
	snap.apply(j.AddProcess(t0, pr("child", "live", idA, vocab.SourceInherited)))
	checkWant(t, "child", snap.procs["child"], want{attr: vocab.AttributionInherited, auditID: idA})
	snap.apply(j.AddProcess(t0, pr("new", "runc", "flood-1999", vocab.SourceEnv)))
	checkWant(t, "new", snap.procs["new"], want{attr: vocab.AttributionAuditID, auditID: "flood-1999"})
	if _, ok := j.Session("flood-0"); ok {
		t.Fatal("the oldest idle record outlived the flood")
	}
}

// TestRecordTooLargeForTheBound: one record over the whole budget is
// emitted, then shed and counted.
func TestRecordTooLargeForTheBound(t *testing.T) {
	j := newJoiner(t, func(c *Config) { c.MaxRecordBytes = 64 << 10 })
	snap := newSnapshot()
	r := xr(idA, "sh", "-c", strings.Repeat("z", 128<<10))
	snap.apply(j.AddRecord(t0, r))
	if _, ok := snap.sessions[idA]; !ok {
		t.Fatal("the session was not emitted")
	}
	if st := j.Stats(); st.Records != 0 || st.EvictedRecords != 1 || st.RecordBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestProcessBytesBound: processes past MaxProcessBytes go oldest first,
// counted.
func TestProcessBytesBound(t *testing.T) {
	const limit = 64 << 10
	j := newJoiner(t, func(c *Config) { c.MaxProcessBytes = limit })
	for i := range 500 {
		p := pr(fmt.Sprintf("p%d", i), "runc", idA, vocab.SourceEnv)
		p.Argv = []string{"sh", "-c", strings.Repeat("a", 512)}
		j.AddProcess(t0, p)
		if st := j.Stats(); st.ProcessBytes > limit {
			t.Fatalf("process %d: %d bytes held, bound %d", i, st.ProcessBytes, limit)
		}
	}
	st := j.Stats()
	if st.EvictedProcesses == 0 || int64(st.Processes)+st.EvictedProcesses != 500 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := j.Process("p499"); !ok {
		t.Fatal("the newest process was shed")
	}
}

// TestLateStageAfterMergerLoss: a stage merger that dropped a request sends
// its last stage alone; the session keeps the stages already seen.
func TestLateStageAfterMergerLoss(t *testing.T) {
	j := newJoiner(t)
	r := xr(idA)
	r.Stages, r.EndTimestamp = []string{auditlog.StageRequestReceived, auditlog.StageResponseStarted}, time.Time{}
	j.AddRecord(t0, r)
	r.Stages, r.EndTimestamp = []string{auditlog.StageResponseComplete}, t0.Add(time.Minute)
	snap := newSnapshot()
	snap.apply(j.AddRecord(t0, r))
	want := []string{auditlog.StageRequestReceived, auditlog.StageResponseStarted, auditlog.StageResponseComplete}
	if s := snap.sessions[idA]; !slices.Equal(s.Stages, want) || s.EndTimestamp.IsZero() {
		t.Fatalf("session stages %v end %v, want %v and the end", s.Stages, s.EndTimestamp, want)
	}
}

// TestEarlyStageAfterMergerLoss: a request's first stage that comes after
// the merger let the request go (its ending stage came first, alone) does
// not take back what the ending stage said: the response code, the end,
// the decision; what only the first stage carried is kept. The control is
// the same two stages in their order.
func TestEarlyStageAfterMergerLoss(t *testing.T) {
	for _, late := range []bool{false, true} {
		j := newJoiner(t)
		full, first := xr(idA), xr(idA)
		full.Stages, full.Code = []string{auditlog.StageResponseComplete}, 403
		full.Annotations = map[string]string{"from": "end", auditlog.AnnotationDecision: "forbid"}
		full.Decision = "forbid"
		first.Stages, first.Code, first.EndTimestamp = []string{auditlog.StageRequestReceived}, 0, time.Time{}
		first.Annotations = map[string]string{"from": "start", "only": "start"}
		snap := newSnapshot()
		if late {
			snap.apply(j.AddRecord(t0, full))
			snap.apply(j.AddRecord(t0, first))
		} else {
			snap.apply(j.AddRecord(t0, first))
			snap.apply(j.AddRecord(t0, full))
		}
		s := snap.sessions[idA]
		want := []string{auditlog.StageRequestReceived, auditlog.StageResponseComplete}
		if !slices.Equal(s.Stages, want) || s.Code != 403 || s.Decision != "forbid" || s.EndTimestamp.IsZero() ||
			s.Annotations["from"] != "end" {
			t.Fatalf("late %v: session stages %v code %d decision %q end %v annotations %v", late, s.Stages, s.Code,
				s.Decision, s.EndTimestamp, s.Annotations)
		}
		if s.Annotations["only"] != "start" {
			t.Fatalf("the late first stage's own annotation was lost: %v", s.Annotations)
		}
	}
}

// TestSharedFieldsNotAliased: records share repeated values inside the
// joiner, but what it is given and what it hands out are the caller's to
// change, shared or too long to share.
func TestSharedFieldsNotAliased(t *testing.T) {
	j := newJoiner(t)
	long := strings.Repeat("g", 2*internMaxLen)
	for _, id := range []string{idA, idB} {
		r := xr(id)
		r.Annotations = map[string]string{"k": "v"}
		r.SourceIPs = []string{long}
		j.AddRecord(t0, r)
		r.User.Groups[0], r.Annotations["k"], r.Stages[0], r.Command[0], r.SourceIPs[0] = "x", "x", "x", "x", "x"
	}
	if s, _ := j.Session(idA); s.User.Groups[0] != "dev" || s.Annotations["k"] != "v" || s.Command[0] != "sh" ||
		s.Stages[0] != auditlog.StageRequestReceived || s.SourceIPs[0] != long {
		t.Fatalf("a change to the caller's record reached the joiner: %+v", s)
	}
	a, _ := j.Session(idA)
	a.User.Groups[0], a.Annotations["k"], a.Stages[0] = "changed", "changed", "changed"
	b, _ := j.Session(idB)
	if b.User.Groups[0] != "dev" || b.Annotations["k"] != "v" || b.Stages[0] != auditlog.StageRequestReceived {
		t.Fatalf("a change to one output reached another session: %+v", b)
	}
}
