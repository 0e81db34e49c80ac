package auditlog

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleLines returns the lines of a committed sample.
func sampleLines(t testing.TB, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(samplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(b), []byte("\n"))
}

// TestMissingIDSeparateRuns: two ID-less GKE execs that differ only in the
// command their request body names get different keys when each is read
// in a run of its own (two agents, two files), and the same keys when read
// together, in either order.
func TestMissingIDSeparateRuns(t *testing.T) {
	lines := sampleLines(t, "gke_request_body.log")[:2] // sh, then cat /etc/hostname: no insertId, no operation
	dir := t.TempDir()
	alone := make([]string, len(lines))
	for i, l := range lines {
		path := filepath.Join(dir, "run"+string(rune('a'+i))+".log")
		if err := os.WriteFile(path, append(l, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		recs, _, _ := decodeAll(t, path)
		if len(recs) != 1 {
			t.Fatalf("run %d: %d records", i, len(recs))
		}
		alone[i] = recs[0].AuditID
	}
	if alone[0] == alone[1] {
		t.Fatalf("two execs of different commands, read in separate runs, share the key %s", alone[0])
	}
	for _, order := range [][]int{{0, 1}, {1, 0}} {
		path := filepath.Join(dir, "together.log")
		var b []byte
		for _, i := range order {
			b = append(append(b, lines[i]...), '\n')
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		recs, _, ms := decodeAll(t, path)
		if len(recs) != 2 || ms.Conflicts != 0 {
			t.Fatalf("order %v: %d records, stats %+v", order, len(recs), ms)
		}
		for j, i := range order {
			if recs[j].AuditID != alone[i] {
				t.Errorf("order %v: %v read together is %s, alone %s", order, recs[j].Command, recs[j].AuditID, alone[i])
			}
		}
	}
}

// filedKey is the ID a fresh Merger files ev under: its key read alone.
func filedKey(m *Merger, ev Event) (string, bool) {
	res := m.Add(ev)
	if len(res.Updated) == 0 {
		return "", false // a redelivery: filed onto a record it found by key
	}
	return res.Updated[len(res.Updated)-1].AuditID, true
}

// nativeStage is one stage of an ID-less kube-apiserver exec request.
func nativeStage(stage string, code int32, body string) Event {
	t0 := time.Date(2026, 3, 4, 16, 0, 0, 0, time.UTC)
	ev := Event{Stage: stage, Verb: "create", User: UserInfo{Username: "alice"}, RequestURI: "/api/v1/namespaces/ns/pods/p/exec",
		SourceIPs: []string{"10.0.0.7"}, UserAgent: "kubectl",
		ObjectRef:                &ObjectReference{Resource: "pods", Namespace: "ns", Name: "p", Subresource: SubresourceExec},
		RequestReceivedTimestamp: Time{t0}, StageTimestamp: Time{t0.Add(40 * time.Millisecond)}}
	if code != 0 {
		ev.ResponseStatus = &Status{Code: code}
	}
	if body != "" {
		ev.RequestObject = json.RawMessage(body)
	}
	return ev
}

// gkeIDless is gkeExec without insertId or operation, with a request body.
func gkeIDless(t testing.TB, edit func(string) string) Event {
	t.Helper()
	line := strings.Replace(gkeExec, `"insertId":"ins-1",`, "", 1)
	line = strings.Replace(line, `"operation":{"first":true,"id":"op-1","last":true,"producer":"k8s.io"},`, "", 1)
	line = strings.Replace(line, `"serviceName":"k8s.io"`,
		`"request":{"@type":"core.k8s.io/v1.PodExecOptions","command":["sh"],"container":"app","stdin":true,"tty":true},"serviceName":"k8s.io"`, 1)
	if edit != nil {
		line = edit(line)
	}
	ev, err := parseGKEEntry([]byte(line))
	if err != nil || ev.AuditID != "" || !IsStreaming(&ev) {
		t.Fatalf("parsing %s: %v (auditID %q)", line, err, ev.AuditID)
	}
	return ev
}

// TestMissingKey: which differences between two ID-less events change the
// key. A native stage's key is what every stage of its request logs, so
// the stages share it with or without a body; a GKE entry is its request
// whole, so what its body asked is part of its key.
func TestMissingKey(t *testing.T) {
	const shBody = `{"kind":"PodExecOptions","container":"app","stdin":true,"tty":true,"command":["sh"]}`
	native := nativeStage(StageResponseStarted, 101, shBody)
	gke := gkeIDless(t, nil)
	replace := func(old, new string) func(string) string {
		return func(s string) string { return strings.Replace(s, old, new, 1) }
	}
	cases := []struct {
		name string
		base Event
		ev   Event
		same bool
	}{
		{"native: RequestReceived, no body, no code", native, nativeStage(StageRequestReceived, 0, ""), true},
		{"native: ResponseComplete with another body", native, nativeStage(StageResponseComplete, 101, `{"command":["id"]}`), true},
		{"native: ResponseComplete 403", native, nativeStage(StageResponseComplete, 403, ""), true},
		{"native: annotations and stage time", native, func() Event {
			ev := nativeStage(StageResponseComplete, 200, shBody)
			ev.Annotations, ev.StageTimestamp = map[string]string{AnnotationDecision: "allow"}, Time{time.Now()}
			return ev
		}(), true},
		{"native: query", native, func() Event { ev := native; ev.RequestURI += "?command=id"; return ev }(), false},
		{"native: user", native, func() Event { ev := native; ev.User.Username = "bob"; return ev }(), false},
		{"native: impersonated", native, func() Event { ev := native; ev.ImpersonatedUser = &UserInfo{Username: "alice"}; return ev }(), false},
		{"native: client", native, func() Event { ev := native; ev.SourceIPs = []string{"10.0.0.8"}; return ev }(), false},
		{"native: user agent", native, func() Event { ev := native; ev.UserAgent = "curl"; return ev }(), false},
		{"native: received", native, func() Event {
			ev := native
			ev.RequestReceivedTimestamp = Time{ev.RequestReceivedTimestamp.Add(time.Microsecond)}
			return ev
		}(), false},
		{"native: pod", native, func() Event {
			ev := native
			ref := *ev.ObjectRef
			ref.Name, ev.ObjectRef, ev.RequestURI = "q", &ref, "/api/v1/namespaces/ns/pods/q/exec"
			return ev
		}(), false},
		{"native: verb", native, func() Event { ev := native; ev.Verb = "get"; return ev }(), false},
		{"gke: same entry", gke, gkeIDless(t, nil), true},
		{"gke: command", gke, gkeIDless(t, replace(`"command":["sh"]`, `"command":["id"]`)), false},
		{"gke: command split", gke, gkeIDless(t, replace(`"command":["sh"]`, `"command":["s","h"]`)), false},
		{"gke: container", gke, gkeIDless(t, replace(`"container":"app"`, `"container":"side"`)), false},
		{"gke: tty", gke, gkeIDless(t, replace(`"tty":true`, `"tty":false`)), false},
		{"gke: no body", gke, gkeIDless(t, replace(`"request":{`, `"unread":{`)), false},
		{"gke: user", gke, gkeIDless(t, replace("alice@example.com", "bob@example.com")), false},
		{"gke: time", gke, gkeIDless(t, replace("11:02:03.123456789Z", "11:02:03.123456788Z")), false},
		{"gke: pod", gke, gkeIDless(t, replace("pods/web/exec", "pods/web2/exec")), false},
		{"gke: receive time only", gke, gkeIDless(t, replace("11:02:04.8Z", "11:09:00Z")), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.base.RecordID(), tc.ev.RecordID()
			if !strings.HasPrefix(a, MissingIDPrefix) || len(a) != len(MissingIDPrefix)+16 {
				t.Fatalf("key %q", a)
			}
			if (a == b) != tc.same {
				t.Errorf("keys %s and %s: same %v, want %v", a, b, a == b, tc.same)
			}
			for _, ev := range []Event{tc.base, tc.ev} {
				if got, _ := filedKey(NewMerger(MergerConfig{}), ev); got != ev.RecordID() {
					t.Errorf("merger filed it under %s, RecordID says %s", got, ev.RecordID())
				}
			}
		})
	}
}

// TestMissingKeyStored: an ID-less event stored as the agent stores it
// (json.Marshal of the parsed event) and parsed again keeps its key, so a
// store lookup re-merging the stages finds the record under it.
func TestMissingKeyStored(t *testing.T) {
	var evs []Event
	p := NewParser(0)
	for _, name := range []string{"missing_id_distinct.log", "missing_audit_id.log", "gke_request_body.log", "request_body.log"} {
		for _, l := range sampleLines(t, name) {
			evs = append(evs, p.ParseLine(l)...)
		}
	}
	evs = append(evs, gkeIDless(t, nil))
	n := 0
	for _, ev := range evs {
		if ev.AuditID != "" {
			continue
		}
		n++
		raw, err := json.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		back := NewParser(0).ParseDocument(raw)
		if len(back) != 1 || back[0].RecordID() != ev.RecordID() {
			t.Errorf("stored %s: read back as %d events, key %s, want %s", raw, len(back), back[0].RecordID(), ev.RecordID())
		}
	}
	if n < 15 {
		t.Fatalf("only %d ID-less events", n)
	}
}

// idlessEvents generates ID-less exec events over small alphabets, so that
// stages of one request, requests differing in one field, and requests
// equal in all that every stage logs all occur: native stages with and
// without bodies and codes, and whole GKE entries.
func idlessEvents(t testing.TB, r *rand.Rand, n int) []Event {
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	evs := make([]Event, 0, n)
	for len(evs) < n {
		if r.IntN(3) == 0 {
			cmd, ctr, user, pod := pick(`["sh"]`, `["id"]`, `["cat","/etc/hostname"]`), pick("app", "side"), pick("alice", "bob"), pick("web", "db")
			ts, status := pick("11:02:03.1Z", "11:02:03.2Z"), pick("", `"status":{"code":7},`)
			evs = append(evs, gkeIDless(t, func(s string) string {
				s = strings.Replace(s, `"command":["sh"]`, `"command":`+cmd, 1)
				s = strings.Replace(s, `"container":"app"`, `"container":"`+ctr+`"`, 1)
				s = strings.Replace(s, "alice@example.com", user+"@example.com", 1)
				s = strings.Replace(s, "pods/web/exec", "pods/"+pod+"/exec", 1)
				s = strings.Replace(s, "11:02:03.123456789Z", ts, 1)
				return strings.Replace(s, `"serviceName"`, status+`"serviceName"`, 1)
			}))
			continue
		}
		stage := pick(StageRequestReceived, StageResponseStarted, StageResponseComplete)
		var code int32
		body := ""
		if stage != StageRequestReceived {
			code = []int32{101, 101, 403}[r.IntN(3)]
			body = pick("", `{"command":["sh"],"tty":true}`, `{"command":["id"]}`)
		}
		ev := nativeStage(stage, code, body)
		ev.User.Username = pick("alice", "bob")
		if r.IntN(2) == 0 {
			ev.RequestURI += "?command=sh"
		}
		if r.IntN(2) == 0 {
			ev.RequestReceivedTimestamp = Time{ev.RequestReceivedTimestamp.Add(time.Second)}
		}
		evs = append(evs, ev)
	}
	return evs
}

// TestMissingKeyOrderProperty: the key of every ID-less event is the same
// whether a Merger reads it alone or with any others, in any order, and is
// what RecordID says.
func TestMissingKeyOrderProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 4))
	checked, conflicts := 0, int64(0)
	for round := range 200 {
		evs := idlessEvents(t, r, 2+r.IntN(24))
		alone := make([]string, len(evs))
		for i, ev := range evs {
			var ok bool
			if alone[i], ok = filedKey(NewMerger(MergerConfig{}), ev); !ok || alone[i] != ev.RecordID() {
				t.Fatalf("round %d event %d: alone %s (%v), RecordID %s", round, i, alone[i], ok, ev.RecordID())
			}
		}
		for range 4 {
			m := NewMerger(MergerConfig{})
			for _, i := range r.Perm(len(evs)) {
				got, ok := filedKey(m, evs[i])
				if !ok {
					continue
				}
				checked++
				if got != alone[i] {
					t.Fatalf("round %d event %d (%s %v): filed under %s read together, %s alone", round, i, evs[i].Stage, evs[i].RequestURI, got, alone[i])
				}
			}
			conflicts += m.Stats().Conflicts
		}
	}
	// The generator must reach the cases that once made variants.
	if checked < 5000 || conflicts == 0 {
		t.Fatalf("checked %d events, %d conflicts: the generator is too tame", checked, conflicts)
	}
}

// FuzzMissingKeyOrder: whatever two lines hold, each event is filed under
// the same key read alone as read with the other line, before or after it.
func FuzzMissingKeyOrder(f *testing.F) {
	for _, name := range []string{"missing_id_distinct.log", "missing_audit_id.log", "gke_request_body.log", "request_body.log"} {
		lines := sampleLines(f, name)
		for i := range lines {
			f.Add(lines[i], lines[(i+1)%len(lines)])
		}
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		p := NewParser(1 << 20)
		ea := slices.Clone(p.ParseLine(a)) // the parser reuses its slice
		all := append(ea, p.ParseLine(b)...)
		alone := make([]string, len(all))
		for i, ev := range all {
			m := NewMerger(MergerConfig{})
			for j := range i { // the events of its own line before it
				if (i < len(ea)) == (j < len(ea)) {
					m.Add(all[j])
				}
			}
			alone[i], _ = filedKey(m, ev)
		}
		for _, order := range [][]int{append(seq(0, len(ea)), seq(len(ea), len(all))...), append(seq(len(ea), len(all)), seq(0, len(ea))...)} {
			m := NewMerger(MergerConfig{})
			for _, i := range order {
				if got, ok := filedKey(m, all[i]); ok && alone[i] != "" && got != alone[i] {
					t.Fatalf("event %d filed under %s read with the other line, %s alone", i, got, alone[i])
				}
			}
		}
	})
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}
