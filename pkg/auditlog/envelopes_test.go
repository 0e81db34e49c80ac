package auditlog

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/vocab"
)

const firehoseKey = "key-0123456789abcdef"

// firehoseBody wraps payloads as Firehose records.
func firehoseBody(t testing.TB, payloads ...[]byte) []byte {
	t.Helper()
	var recs []map[string]string
	for _, p := range payloads {
		recs = append(recs, map[string]string{"data": base64.StdEncoding.EncodeToString(p)})
	}
	b, err := json.Marshal(map[string]any{"requestId": "req-1", "timestamp": 1772633100000, "records": recs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func cwData(t testing.TB, messageType string, messages ...string) []byte {
	t.Helper()
	var evs []map[string]any
	for i, m := range messages {
		evs = append(evs, map[string]any{"id": "3800000000000000000000000000000000000000000000000000000" + string(rune('0'+i)), "timestamp": 1772633000000, "message": m})
	}
	b, _ := json.Marshal(map[string]any{"messageType": messageType, "logGroup": "/aws/eks/c/cluster", "logStream": "kube-apiserver-audit-1", "logEvents": evs})
	return b
}

func TestParserEnvelopes(t *testing.T) {
	exec := streamingLines[0]
	aks := func(cat, log string) string {
		return `{"category":"` + cat + `","properties":{"log":` + log + `,"stream":"stdout"},"time":"2026-03-04T14:00:01.0000000Z"}`
	}
	quoted, _ := json.Marshal(exec + "\n")
	cases := []struct {
		name    string
		in      []byte
		events  int
		skipped map[string]int64
	}{
		{"aks line, log a string", []byte(aks("kube-audit", string(quoted))), 1, nil},
		{"aks line, log an object", []byte(aks("kube-audit-admin", exec)), 1, nil},
		{"aks line, no category", []byte(`{"properties":{"log":` + string(quoted) + `}}`), 1, nil},
		{"aks line, another category", []byte(aks("kube-apiserver", `"I0304 started"`)), 0, map[string]int64{"not_an_event": 1}},
		{"aks line, log a number", []byte(aks("kube-audit", "42")), 0, map[string]int64{"bad_envelope": 1}},
		{"object with properties, not a record", []byte(`{"properties":{"a":1}}`), 0, map[string]int64{"not_an_event": 1}},
		{"firehose gzip'd subscription data", firehoseBody(t, gz(t, cwData(t, "DATA_MESSAGE", exec))), 1, nil},
		{"firehose plain subscription data", firehoseBody(t, cwData(t, "DATA_MESSAGE", exec, exec)), 2, nil},
		{"firehose control message", firehoseBody(t, gz(t, cwData(t, "CONTROL_MESSAGE", "CWL CONTROL MESSAGE: Checking health of destination Firehose."))), 0, nil},
		{"firehose extracted messages", firehoseBody(t, []byte(exec+"\n"+exec+"\n")), 2, nil},
		{"firehose bad base64", []byte(`{"requestId":"r","records":[{"data":"%%"}]}`), 0, map[string]int64{"bad_envelope": 1}},
		{"firehose empty data", []byte(`{"requestId":"r","records":[{"data":""}]}`), 0, map[string]int64{"bad_envelope": 1}},
		{"firehose gzip bomb", firehoseBody(t, gz(t, bytes.Repeat([]byte(" "), 5<<10))), 0, map[string]int64{"too_large": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewParser(0)
			if strings.Contains(tc.name, "bomb") {
				p = NewParser(1 << 10) // inflates to 4 KiB at most
			}
			evs := p.ParseDocument(tc.in)
			c := p.Counts()
			if len(evs) != tc.events {
				t.Errorf("%d events, want %d (skipped %v)", len(evs), tc.events, c.SkippedByName())
			}
			want := tc.skipped
			if want == nil {
				want = map[string]int64{}
			}
			if got := c.SkippedByName(); !mapsEqual(got, want) {
				t.Errorf("skipped %v, want %v", got, want)
			}
		})
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// postFirehose sends body as Firehose does.
func postFirehose(h http.Handler, body []byte, key string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(firehoseRequestIDHeader, "req-1")
	req.Header.Set(firehoseProtocolHeader, "1.0")
	if key != "" {
		req.Header.Set(firehoseAccessKeyHeader, key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestWebhookFirehose(t *testing.T) {
	body, err := os.ReadFile(filepath.Join(samplesDir, "firehose_delivery.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		cfg      WebhookConfig
		key      string
		hdr      map[string]string
		body     []byte
		code     int
		events   int
		errorMsg bool
	}{
		{name: "delivery", cfg: WebhookConfig{FirehoseAccessKey: firehoseKey}, key: firehoseKey, body: body, code: 200, events: 4},
		{name: "gzip content encoding", cfg: WebhookConfig{FirehoseAccessKey: firehoseKey}, key: firehoseKey, body: gz(t, body),
			hdr: map[string]string{"Content-Encoding": "gzip"}, code: 200, events: 4},
		{name: "control message only", cfg: WebhookConfig{FirehoseAccessKey: firehoseKey}, key: firehoseKey,
			body: firehoseBody(t, gz(t, cwData(t, "CONTROL_MESSAGE", "CWL CONTROL MESSAGE"))), code: 200},
		{name: "no key sent", cfg: WebhookConfig{FirehoseAccessKey: firehoseKey}, body: body, code: 401, errorMsg: true},
		{name: "wrong key", cfg: WebhookConfig{FirehoseAccessKey: firehoseKey}, key: firehoseKey + "x", body: body, code: 401, errorMsg: true},
		{name: "no key configured", cfg: WebhookConfig{BearerToken: "tok"}, key: firehoseKey, body: body, code: 401, errorMsg: true},
		{name: "no key configured, unauthenticated receiver", key: firehoseKey, body: body, code: 401, errorMsg: true},
		{name: "nothing decodable", cfg: WebhookConfig{FirehoseAccessKey: firehoseKey}, key: firehoseKey,
			body: []byte(`{"requestId":"req-1","records":[{"data":"%%"}]}`), code: 400, errorMsg: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var taken []Event
			sink := func(_ context.Context, evs []Event) error { taken = append(taken, evs...); return nil }
			rec := postFirehose(NewWebhookHandler(tc.cfg, sink, zerolog.Nop(), nil), tc.body, tc.key, tc.hdr)
			if rec.Code != tc.code || len(taken) != tc.events {
				t.Fatalf("status %d (want %d), %d events (want %d): %s", rec.Code, tc.code, len(taken), tc.events, rec.Body)
			}
			var resp firehoseResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.RequestID != "req-1" || resp.Timestamp == 0 ||
				(resp.ErrorMessage != "") != tc.errorMsg || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("response %q (%+v, %v)", rec.Body, resp, err)
			}
		})
	}
}

// TestWebhookFirehoseOnly: a receiver configured for Firehose alone
// refuses other senders, which nothing else would check; with bearer
// tokens too each sender is checked its own way.
func TestWebhookFirehoseOnly(t *testing.T) {
	sink := func(context.Context, []Event) error { return nil }
	list := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[]}`)
	post := func(h http.Handler, auth string) int {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(list))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	only := NewWebhookHandler(WebhookConfig{FirehoseAccessKey: firehoseKey}, sink, zerolog.Nop(), nil)
	if code := post(only, ""); code != http.StatusUnauthorized {
		t.Errorf("plain POST to a Firehose-only receiver: %d", code)
	}
	both := NewWebhookHandler(WebhookConfig{FirehoseAccessKey: firehoseKey, BearerToken: "tok-0123456789abcdef"}, sink, zerolog.Nop(), nil)
	if code := post(both, "tok-0123456789abcdef"); code != http.StatusOK {
		t.Errorf("bearer POST: %d", code)
	}
	if code := post(both, firehoseKey); code != http.StatusUnauthorized {
		t.Errorf("the access key as a bearer token: %d", code)
	}
	if _, err := NewWebhookServer(WebhookConfig{Listen: "0.0.0.0:0", FirehoseAccessKey: firehoseKey}, zerolog.Nop(), nil); err != nil {
		t.Errorf("a Firehose-only server off loopback: %v", err)
	}
}

// FuzzFirehose drives the webhook with Firehose deliveries: it never
// panics, answers Firehose's JSON naming the request, and takes events in
// only from a sender with the key.
func FuzzFirehose(f *testing.F) {
	f.Add(firehoseBody(f, gz(f, cwData(f, "DATA_MESSAGE", streamingLines[0]))), firehoseKey)
	f.Add([]byte(`{"requestId":"r","records":[{"data":"H4sI"}]}`), firehoseKey)
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		var taken int
		sink := func(_ context.Context, evs []Event) error { taken += len(evs); return nil }
		h := NewWebhookHandler(WebhookConfig{FirehoseAccessKey: firehoseKey, MaxBodyBytes: 64 << 10, MaxLineBytes: 16 << 10}, sink, zerolog.Nop(), nil)
		rec := postFirehose(h, body, key, nil)
		var resp firehoseResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.RequestID != "req-1" {
			t.Fatalf("status %d response %q: %v", rec.Code, rec.Body, err)
		}
		if key != firehoseKey && (rec.Code != http.StatusUnauthorized || taken != 0) {
			t.Fatalf("wrong key answered %d, took %d events", rec.Code, taken)
		}
		if rec.Code != http.StatusOK && taken != 0 {
			t.Fatalf("%d after taking %d events", rec.Code, taken)
		}
	})
}

func TestBoundAuditID(t *testing.T) {
	long := strings.Repeat("x", 300)
	a, cutA := BoundAuditID(long + "a")
	b, cutB := BoundAuditID(long + "b")
	again, _ := BoundAuditID(long + "a")
	if !cutA || !cutB || a == b || a != again || len(a) > MaxAuditIDBytes || !strings.HasPrefix(a, "xxx") {
		t.Errorf("bounded %q %q", a, b)
	}
	if id, cut := BoundAuditID(strings.Repeat("y", MaxAuditIDBytes)); cut || len(id) != MaxAuditIDBytes {
		t.Errorf("a %d-byte ID was cut", MaxAuditIDBytes)
	}
	// A cut never splits a UTF-8 sequence.
	if id, _ := BoundAuditID(strings.Repeat("é", 400)); !strings.HasPrefix(id, "éé") || !isValidUTF8(id) {
		t.Errorf("cut %q", id)
	}
	// The parser bounds, counts and the merger flags.
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Replace(streamingLines[0], `"auditID":"`, `"auditID":"`+strings.Repeat("z", 1<<20), 1)
	d := NewDecoder(DecoderConfig{}, zerolog.Nop(), m)
	mg := NewMerger(MergerConfig{})
	c, err := d.Decode(strings.NewReader(line+"\n"), "t", func(evs []Event) error {
		for _, ev := range evs {
			mg.Add(ev)
		}
		return nil
	})
	recs := mg.Records()
	if err != nil || c.IDsTruncated != 1 || len(recs) != 1 || len(recs[0].AuditID) > MaxAuditIDBytes || !recs[0].HasFlag(vocab.FlagAuditIDTruncated) {
		t.Fatalf("counts %+v records %d err %v", c, len(recs), err)
	}
	if got := promtest.ToFloat64(m.idsTruncated); got != 1 {
		t.Errorf("metric %v", got)
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// TestSyntheticRecordID: any difference in what a request asked changes
// its key; the stages of one request share it.
func TestSyntheticRecordID(t *testing.T) {
	yes := true
	base := ExecRecord{Verb: "create", User: UserInfo{Username: "alice"}, Namespace: "ns", Pod: "p", Subresource: "exec",
		Container: "c", Command: []string{"sh"}, Stdin: &yes, RequestURI: "/api/v1/namespaces/ns/pods/p/exec",
		RequestReceivedTimestamp: time.Date(2026, 3, 4, 16, 0, 0, 0, time.UTC), SourceIPs: []string{"10.0.0.7"}, UserAgent: "kubectl"}
	k := SyntheticRecordID(&base)
	for name, change := range map[string]func(r *ExecRecord){
		"namespace":   func(r *ExecRecord) { r.Namespace = "ns2" },
		"pod":         func(r *ExecRecord) { r.Pod = "p2" },
		"subresource": func(r *ExecRecord) { r.Subresource = "attach" },
		"container":   func(r *ExecRecord) { r.Container = "d" },
		"command":     func(r *ExecRecord) { r.Command = []string{"sh", ""} },
		"command split": func(r *ExecRecord) {
			r.Command, r.Container = []string{"s", "h"}, "c"
		},
		"stdin unknown": func(r *ExecRecord) { r.Stdin = nil },
		"time":          func(r *ExecRecord) { r.RequestReceivedTimestamp = r.RequestReceivedTimestamp.Add(time.Microsecond) },
		"client ip":     func(r *ExecRecord) { r.SourceIPs = []string{"10.0.0.8"} },
		"user agent":    func(r *ExecRecord) { r.UserAgent = "curl" },
		"user":          func(r *ExecRecord) { r.User.Username = "bob" },
		"impersonated":  func(r *ExecRecord) { r.ImpersonatedUser = &UserInfo{Username: "alice"} },
		"verb":          func(r *ExecRecord) { r.Verb = "get" },
	} {
		r := base.Clone()
		change(&r)
		if SyntheticRecordID(&r) == k {
			t.Errorf("%s: same key", name)
		}
	}
	// Stages: what changes between them (stage, code, end, annotations)
	// does not change the key.
	r := base.Clone()
	r.Stages, r.Code, r.EndTimestamp, r.Annotations = []string{StageResponseComplete}, 101, time.Now(), map[string]string{"a": "b"}
	if SyntheticRecordID(&r) != k || !strings.HasPrefix(k, MissingIDPrefix) {
		t.Errorf("stage fields changed the key")
	}
}

// TestMergerBodyOnlyCommands: ID-less native requests told apart only by
// their bodies or codes share one key (their RequestReceived says neither),
// and each keeps its stages as a record of its own, flagged
// audit_id_conflict.
func TestMergerBodyOnlyCommands(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 16, 0, 0, 0, time.UTC)
	mk := func(stage string, code int32, body string) Event {
		ev := Event{Stage: stage, Verb: "create", User: UserInfo{Username: "alice"}, RequestURI: "/api/v1/namespaces/ns/pods/p/exec",
			ObjectRef:                &ObjectReference{Resource: "pods", Namespace: "ns", Name: "p", Subresource: SubresourceExec},
			RequestReceivedTimestamp: Time{t0}, StageTimestamp: Time{t0}}
		if code != 0 {
			ev.ResponseStatus = &Status{Code: code}
		}
		if body != "" {
			ev.RequestObject = json.RawMessage(`{"kind":"PodExecOptions","command":["` + body + `"]}`)
		}
		return ev
	}
	m := NewMerger(MergerConfig{})
	evs := []Event{
		mk(StageRequestReceived, 0, ""), mk(StageResponseStarted, 101, "sh"), mk(StageResponseStarted, 101, "id"),
		mk(StageResponseComplete, 101, "id"), mk(StageResponseComplete, 101, "sh"), mk(StageResponseComplete, 403, ""),
	}
	for _, ev := range evs {
		m.Add(ev)
	}
	recs := m.Records()
	if st := m.Stats(); len(recs) != 3 || st.Conflicts != 2 || st.Duplicates != 0 {
		t.Fatalf("%d records, stats %+v", len(recs), st)
	}
	want := [][]string{{StageRequestReceived, StageResponseStarted, StageResponseComplete}, {StageResponseStarted, StageResponseComplete}, {StageResponseComplete}}
	for i, r := range recs {
		if !slices.Equal(r.Stages, want[i]) || !r.HasFlag(vocab.FlagMissingAuditID) || !r.HasFlag(vocab.FlagAuditIDConflict) ||
			r.AuditID != evs[0].RecordID() {
			t.Errorf("record %d %v: %s stages %v flags %v", i, r.Command, r.AuditID, r.Stages, r.Flags)
		}
	}
}

// FuzzExecOptions: a logged options body never panics, never replaces
// what the query says, and fills in only what it left unknown.
func FuzzExecOptions(f *testing.F) {
	f.Add(`{"kind":"PodExecOptions","stdin":true,"command":["sh"]}`, "/api/v1/namespaces/ns/pods/p/exec?command=id")
	f.Fuzz(func(t *testing.T, body, uri string) {
		ev := Event{RequestURI: uri, Verb: "get", RequestObject: json.RawMessage(body),
			ObjectRef: &ObjectReference{Resource: "pods", Namespace: "ns", Name: "p", Subresource: SubresourceExec}}
		bare := ev
		bare.RequestObject = nil
		r, q := newRecord(&ev), newRecord(&bare)
		if len(q.Command) > 0 && !slices.Equal(r.Command, q.Command) || q.Container != "" && r.Container != q.Container ||
			q.Stdin != nil && *r.Stdin != *q.Stdin || q.TTY != nil && *r.TTY != *q.TTY {
			t.Fatalf("body overrode the query: %+v vs %+v", r, q)
		}
	})
}
