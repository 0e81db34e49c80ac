package auditlog

import (
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

func TestParseTime(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UTC()
	}
	for _, tc := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2026-01-02T03:04:05.600000Z", want: utc("2026-01-02T03:04:05.6Z")},
		{in: "2026-01-02T03:04:05Z", want: utc("2026-01-02T03:04:05Z")},
		{in: "2026-01-02T03:04:05.123456789Z", want: utc("2026-01-02T03:04:05.123456789Z")},
		{in: "2026-03-04T10:15:31.0000000Z", want: utc("2026-03-04T10:15:31Z")},
		{in: "2022-11-29 00:09:04.38", want: utc("2022-11-29T00:09:04.38Z")},
		{in: "2026-01-02T05:04:05.1+02:00", want: utc("2026-01-02T03:04:05.1Z")},
		{in: "2026-01-02T03:04:05-0130", want: utc("2026-01-02T04:34:05Z")},
		{in: "", want: time.Time{}},
		{in: "2026-01-02T03:04:05.1234567891Z", bad: true},
		{in: "2026-02-30T00:00:00Z", bad: true},
		{in: "yesterday", bad: true},
		{in: "2026-01-02T03:04:05ZZ", bad: true},
	} {
		got, err := parseTime([]byte(tc.in))
		if (err != nil) != tc.bad {
			t.Errorf("%q: err = %v", tc.in, err)
			continue
		}
		if !tc.bad && !got.Equal(tc.want) {
			t.Errorf("%q = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseRequestURI(t *testing.T) {
	ref, p := parseRequestURI("/api/v1/namespaces/ns/pods/web/exec?command=sh&command=-c&command=echo+%22a%26b%22+%3E%2Ftmp%2Fx&container=c&container=d&env=FOO%3Dbar&env=EMPTY%3D&stdin=true&tty=1")
	if ref != (PathRef{Namespace: "ns", Pod: "web", Subresource: "exec"}) {
		t.Errorf("ref = %+v", ref)
	}
	if !slices.Equal(p.Command, []string{"sh", "-c", `echo "a&b" >/tmp/x`}) {
		t.Errorf("command = %q", p.Command)
	}
	if !slices.Equal(p.Env, []string{"FOO=bar", "EMPTY="}) || p.Container != "c" || p.Stdin == nil || !*p.Stdin || p.TTY == nil || !*p.TTY || p.DecodeError {
		t.Errorf("params = %+v", p)
	}
	_, p = parseRequestURI("/api/v1/namespaces/ns/pods/web/exec?command=%zz&command=ok")
	if !p.DecodeError || !slices.Equal(p.Command, []string{"%zz", "ok"}) {
		t.Errorf("bad escape: %+v", p)
	}
}

func streamEvent(id, stage string, code int32, at string) Event {
	ts, _ := parseTime([]byte(at))
	return Event{
		AuditID: id, Stage: stage, Verb: "get", RequestURI: "/api/v1/namespaces/ns/pods/p/exec?command=id",
		User:           UserInfo{Username: "alice"},
		ObjectRef:      &ObjectReference{Resource: "pods", Namespace: "ns", Name: "p", Subresource: "exec"},
		ResponseStatus: &Status{Code: code}, StageTimestamp: Time{ts},
		RequestReceivedTimestamp: Time{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		Annotations:              map[string]string{AnnotationDecision: "allow", "stage": stage},
	}
}

func TestMergerOrderIndependent(t *testing.T) {
	evs := []Event{
		streamEvent("a", StageRequestReceived, 0, "2026-01-01T00:00:00Z"),
		streamEvent("a", StageResponseStarted, 101, "2026-01-01T00:00:01Z"),
		streamEvent("a", StageResponseComplete, 200, "2026-01-01T00:05:00Z"),
	}
	var first ExecRecord
	for i, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {2, 0, 2, 1, 1}} {
		m := NewMerger(MergerConfig{})
		for _, j := range order {
			m.Add(evs[j])
		}
		recs := m.Records()
		if len(recs) != 1 {
			t.Fatalf("order %v: %d records", order, len(recs))
		}
		r := recs[0]
		if i == 0 {
			first = r
			if r.Code != 200 || r.Annotations["stage"] != StageResponseComplete || !r.Complete() ||
				!r.EndTimestamp.Equal(time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC)) {
				t.Fatalf("record = %+v", r)
			}
			continue
		}
		if r.Code != first.Code || r.Annotations["stage"] != first.Annotations["stage"] ||
			!slices.Equal(r.Stages, first.Stages) || !r.EndTimestamp.Equal(first.EndTimestamp) {
			t.Errorf("order %v gave %+v, want %+v", order, r, first)
		}
		if order[0] == 2 && len(order) == 5 && m.Stats().Duplicates != 2 {
			t.Errorf("duplicates = %d, want 2", m.Stats().Duplicates)
		}
	}
}

func TestMergerConflictAndEviction(t *testing.T) {
	m := NewMerger(MergerConfig{MaxRecords: 2})
	a := streamEvent("x", StageResponseStarted, 101, "2026-01-01T00:00:01Z")
	b := a
	b.User = UserInfo{Username: "mallory"}
	m.Add(a)
	res := m.Add(b)
	if len(res.Updated) != 2 || !res.Updated[0].HasFlag(vocab.FlagAuditIDConflict) || !res.Updated[1].HasFlag(vocab.FlagAuditIDConflict) {
		t.Fatalf("conflict result = %+v", res.Updated)
	}
	if got := m.Lookup("x"); len(got) != 2 {
		t.Fatalf("lookup = %d records", len(got))
	}
	// Mutating a returned copy must not reach the merger.
	res.Updated[0].Command[0] = "changed"
	if m.Lookup("x")[0].Command[0] != "id" {
		t.Fatal("returned record aliases merger state")
	}
	res = m.Add(streamEvent("y", StageResponseStarted, 101, "2026-01-01T00:00:02Z"))
	if len(res.Evicted) != 1 || res.Evicted[0].User.Username != "alice" || m.Stats().Evicted != 1 || m.Stats().Records != 2 {
		t.Fatalf("eviction: %+v stats %+v", res.Evicted, m.Stats())
	}
	if m.Add(Event{Verb: "list"}).Updated != nil || m.Stats().Ignored != 1 {
		t.Fatal("non-streaming event was merged")
	}
}

// TestMergerByteBound: past MaxBytes (as Size measures) the oldest records
// go first and are counted; a record that grows with its stages is
// re-measured; below the bound nothing is evicted (the control).
func TestMergerByteBound(t *testing.T) {
	size := func(r *ExecRecord) int { return 100 * len(r.Stages) }
	m := NewMerger(MergerConfig{MaxBytes: 450, Size: size})
	for _, id := range []string{"a", "b", "c", "d"} {
		if res := m.Add(streamEvent(id, StageResponseStarted, 101, "2026-01-01T00:00:01Z")); len(res.Evicted) != 0 {
			t.Fatalf("%s: evicted %d below the bound", id, len(res.Evicted))
		}
	}
	if st := m.Stats(); st.Bytes != 400 || st.Records != 4 {
		t.Fatalf("four records: %+v", st)
	}
	// d's second stage makes it 200 bytes: 500 > 450, so a (the oldest) goes.
	res := m.Add(streamEvent("d", StageResponseComplete, 200, "2026-01-01T00:00:02Z"))
	if len(res.Evicted) != 1 || res.Evicted[0].AuditID != "a" {
		t.Fatalf("evicted %+v, want a", res.Evicted)
	}
	if st := m.Stats(); st.Bytes != 400 || st.Records != 3 || st.Evicted != 1 || len(m.Lookup("a")) != 0 {
		t.Fatalf("after eviction: %+v", st)
	}
}
