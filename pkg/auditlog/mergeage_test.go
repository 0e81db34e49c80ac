package auditlog

import (
	"slices"
	"testing"
	"time"
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
