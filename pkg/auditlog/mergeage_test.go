package auditlog

import (
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// TestMergerIdle: a complete request leaves DoneIdle after its last stage
// and an open one OpenIdle after it (at most an eighth later: Expire walks
// the records eight times per bound), timed from the first Expire that saw
// the stage; a stage in between starts the wait again; what stays is kept
// (the control), and the bytes and the cap's order follow what is held.
func TestMergerIdle(t *testing.T) {
	size := func(r *ExecRecord) int { return 100 * len(r.Stages) }
	m := NewMerger(MergerConfig{MaxRecords: 3, Size: size, DoneIdle: 2 * time.Minute, OpenIdle: time.Hour})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := "2026-01-01T00:00:01Z"
	for _, st := range []string{StageRequestReceived, StageResponseStarted, StageResponseComplete} {
		m.Add(streamEvent("done", st, 200, at))
	}
	m.Add(streamEvent("open", StageResponseStarted, 101, at))
	m.Add(streamEvent("ends", StageResponseStarted, 101, at))
	m.Expire(t0)
	m.Expire(t0.Add(2*time.Minute - time.Second))
	if st := m.Stats(); st.Records != 3 || st.Expired != 0 {
		t.Fatalf("before DoneIdle: %+v", st)
	}
	// "ends" completes at one minute: its two minutes start then.
	m.Add(streamEvent("ends", StageResponseComplete, 200, at))
	m.Expire(t0.Add(time.Minute))
	m.Expire(t0.Add(2*time.Minute + 15*time.Second))
	if st := m.Stats(); st.Records != 2 || st.Expired != 1 || len(m.Lookup("done")) != 0 || st.Bytes != 300 {
		t.Fatalf("at DoneIdle: %+v, done held %d", st, len(m.Lookup("done")))
	}
	m.Expire(t0.Add(3*time.Minute + 15*time.Second))
	if st := m.Stats(); st.Records != 1 || len(m.Lookup("open")) != 1 || st.Bytes != 100 {
		t.Fatalf("a minute after ends' DoneIdle: %+v", st)
	}
	// The cap still sheds the oldest held record.
	m.Add(streamEvent("b", StageResponseStarted, 101, at))
	m.Add(streamEvent("c", StageResponseStarted, 101, at))
	if res := m.Add(streamEvent("d", StageResponseStarted, 101, at)); len(res.Evicted) != 1 || res.Evicted[0].AuditID != "open" {
		t.Fatalf("cap after a sweep evicted %+v, want open", res.Evicted)
	}
	m.Expire(t0.Add(4 * time.Minute))
	m.Expire(t0.Add(time.Hour + 4*time.Minute))
	if st := m.Stats(); st.Records != 0 || st.Bytes != 0 || st.Expired != 5 || st.Evicted != 1 {
		t.Fatalf("after OpenIdle: %+v", st)
	}
	// A stage after its request left is filed alone.
	res := m.Add(streamEvent("done", StageRequestReceived, 0, at))
	if len(res.Updated) != 1 || !slices.Equal(res.Updated[0].Stages, []string{StageRequestReceived}) || res.Duplicate {
		t.Fatalf("a stage after the request left: %+v", res)
	}
}

// TestMergerNoAgeBound: without DoneIdle and OpenIdle, Expire keeps
// everything (the Merger of `audit parse` and the lookups).
func TestMergerNoAgeBound(t *testing.T) {
	m := NewMerger(MergerConfig{})
	m.Add(streamEvent("a", StageResponseComplete, 200, "2026-01-01T00:00:01Z"))
	t0 := time.Now()
	m.Expire(t0)
	m.Expire(t0.Add(1000 * time.Hour))
	if st := m.Stats(); st.Records != 1 || st.Expired != 0 || len(m.fresh) != 0 {
		t.Fatalf("no age bound: %+v, %d fresh", st, len(m.fresh))
	}
}

// TestMergerConflictAfterLettingGo: a different request under an audit ID
// whose request the Merger let go (idle, or its cap) is still flagged
// audit_id_conflict; a late stage of the request itself is not (the
// control); and what is remembered is bounded by MaxRecords, oldest first.
func TestMergerConflictAfterLettingGo(t *testing.T) {
	m := NewMerger(MergerConfig{MaxRecords: 2, DoneIdle: time.Minute, OpenIdle: time.Hour})
	at := "2026-01-01T00:00:01Z"
	for _, st := range []string{StageRequestReceived, StageResponseStarted, StageResponseComplete} {
		m.Add(streamEvent("x", st, 200, at))
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Expire(t0)
	m.Expire(t0.Add(2 * time.Minute))
	if len(m.Lookup("x")) != 0 {
		t.Fatal("the request was not let go")
	}
	late := m.Add(streamEvent("x", StageRequestReceived, 0, at))
	if len(late.Updated) != 1 || late.Updated[0].HasFlag(vocab.FlagAuditIDConflict) {
		t.Fatalf("a late stage of the same request was flagged: %+v", late.Updated)
	}
	m.Expire(t0.Add(3 * time.Minute))
	m.Expire(t0.Add(2 * time.Hour))
	other := streamEvent("x", StageResponseStarted, 101, at)
	other.User = UserInfo{Username: "mallory"}
	res := m.Add(other)
	if len(res.Updated) != 1 || !res.Updated[0].HasFlag(vocab.FlagAuditIDConflict) || m.Stats().Conflicts != 1 {
		t.Fatalf("another request under a let-go ID: %+v, stats %+v", res.Updated, m.Stats())
	}
	// Past MaxRecords let go, the oldest is forgotten: x's alice request
	// (and now mallory's, evicted by the cap) make way for y's and z's.
	for _, id := range []string{"y", "z", "w"} {
		m.Add(streamEvent(id, StageResponseStarted, 101, at))
	}
	fresh := streamEvent("x", StageResponseStarted, 101, at)
	fresh.User = UserInfo{Username: "eve"}
	m.Expire(t0.Add(3 * time.Hour))
	m.Expire(t0.Add(5 * time.Hour))
	if res := m.Add(fresh); len(res.Updated) != 1 || res.Updated[0].HasFlag(vocab.FlagAuditIDConflict) {
		t.Fatalf("a conflict past the bound of what is remembered: %+v", res.Updated)
	}
	if n := len(m.gone.queue) - m.gone.head; n > 2 {
		t.Fatalf("%d let-go requests remembered, want at most MaxRecords 2", n)
	}
}
