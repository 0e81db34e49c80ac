package auditlog

import (
	"bytes"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

const gkeExec = `{"insertId":"ins-1","labels":{"authorization.k8s.io/decision":"allow"},` +
	`"operation":{"first":true,"id":"op-1","last":true,"producer":"k8s.io"},` +
	`"protoPayload":{"@type":"type.googleapis.com/google.cloud.audit.AuditLog","authenticationInfo":{"principalEmail":"alice@example.com"},` +
	`"authorizationInfo":[{"granted":true,"permission":"io.k8s.core.v1.pods.exec.create"}],"methodName":"io.k8s.core.v1.pods.exec.create",` +
	`"requestMetadata":{"callerIp":"203.0.113.10","callerSuppliedUserAgent":"kubectl/v1.29.4"},` +
	`"resourceName":"core/v1/namespaces/shop/pods/web/exec","serviceName":"k8s.io"},` +
	`"receiveTimestamp":"2026-03-04T11:02:04.8Z","resource":{"labels":{"cluster_name":"c"},"type":"k8s_cluster"},"timestamp":"2026-03-04T11:02:03.123456789Z"}`

func TestParseGKEEntry(t *testing.T) {
	set := func(old, new string) string { return strings.Replace(gkeExec, old, new, 1) }
	cases := []struct {
		name   string
		in     string
		check  func(t *testing.T, ev Event)
		err    error
		stream bool
	}{
		{name: "exec", in: gkeExec, stream: true, check: func(t *testing.T, ev Event) {
			want := ObjectReference{Resource: "pods", Namespace: "shop", Name: "web", APIVersion: "v1", Subresource: SubresourceExec}
			if ev.ObjectRef == nil || *ev.ObjectRef != want || ev.Verb != "create" || ev.AuditID != "op-1" ||
				ev.User.Username != "alice@example.com" || !slices.Equal(ev.SourceIPs, []string{"203.0.113.10"}) ||
				ev.UserAgent != "kubectl/v1.29.4" || ev.Stage != StageResponseStarted || ev.ResponseStatus != nil {
				t.Errorf("event %+v ref %+v", ev, ev.ObjectRef)
			}
			if !ev.RequestReceivedTimestamp.Equal(time.Date(2026, 3, 4, 11, 2, 3, 123456789, time.UTC)) {
				t.Errorf("received %v", ev.RequestReceivedTimestamp)
			}
		}},
		{name: "websocket get", in: set("exec.create", "exec.get"), stream: true},
		{name: "no operation: insertId", in: set(`"operation":{"first":true,"id":"op-1","last":true,"producer":"k8s.io"},`, ""), stream: true,
			check: func(t *testing.T, ev Event) {
				if ev.AuditID != "ins-1" {
					t.Errorf("auditID %q", ev.AuditID)
				}
			}},
		{name: "denied", in: set(`"granted":true`, `"granted":false`), stream: true, check: func(t *testing.T, ev Event) {
			if ev.decision != "forbid" {
				t.Errorf("decision %q", ev.decision)
			}
		}},
		{name: "permission denied status", in: set(`"serviceName"`, `"status":{"code":7,"message":"forbidden"},"serviceName"`), stream: true,
			check: func(t *testing.T, ev Event) {
				if ev.ResponseStatus == nil || ev.ResponseStatus.Code != 403 || ev.ResponseStatus.Message != "forbidden" {
					t.Errorf("status %+v", ev.ResponseStatus)
				}
			}},
		{name: "last entry of a split operation", in: set(`"first":true,`, ""), stream: true, check: func(t *testing.T, ev Event) {
			if ev.Stage != StageResponseComplete || !ev.RequestReceivedTimestamp.IsZero() || ev.StageTimestamp.IsZero() {
				t.Errorf("stage %s received %v at %v", ev.Stage, ev.RequestReceivedTimestamp, ev.StageTimestamp)
			}
		}},
		{name: "query string, should GKE ever log one", in: set("web/exec", "web/exec?command=sh\\u0026container=app"), stream: true,
			check: func(t *testing.T, ev Event) {
				if r := newRecord(&ev); !slices.Equal(r.Command, []string{"sh"}) || r.Container != "app" || r.Pod != "web" {
					t.Errorf("record %+v", r)
				}
			}},
		{name: "principalSubject", in: set(`"principalEmail":"alice@example.com"`, `"principalSubject":"user:bob"`), stream: true,
			check: func(t *testing.T, ev Event) {
				if ev.User.Username != "user:bob" {
					t.Errorf("user %q", ev.User.Username)
				}
			}},
		{name: "pods get", in: set("core/v1/namespaces/shop/pods/web/exec", "core/v1/namespaces/shop/pods/web")},
		{name: "other API group", in: set("core/v1/", "apps/v1/")},
		{name: "other service", in: set(`"serviceName":"k8s.io"`, `"serviceName":"container.googleapis.com"`), err: errNotKubernetes},
		{name: "other method", in: set(`"methodName":"io.k8s.`, `"methodName":"google.container.`), err: errNotKubernetes},
		{name: "wrong type", in: set(`"callerIp":"203.0.113.10"`, `"callerIp":7`), err: errBadType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := parseGKEEntry([]byte(tc.in))
			switch {
			case tc.err == errBadType:
				if decodeReason(err) != ReasonBadFieldType {
					t.Fatalf("err %v", err)
				}
				return
			case !errors.Is(err, tc.err):
				t.Fatalf("err %v, want %v", err, tc.err)
			case err != nil:
				return
			}
			if IsStreaming(&ev) != tc.stream {
				t.Errorf("streaming %v, want %v (%+v)", IsStreaming(&ev), tc.stream, ev.ObjectRef)
			}
			if tc.check != nil {
				tc.check(t, ev)
			}
		})
	}
}

var errBadType = errors.New("bad field type")

func TestGKEObjectRef(t *testing.T) {
	for in, want := range map[string]*ObjectReference{
		"core/v1/namespaces/ns/pods/p/exec":                {Resource: "pods", Namespace: "ns", Name: "p", APIVersion: "v1", Subresource: "exec"},
		"core/v1/namespaces/ns/pods/p/ephemeralcontainers": {Resource: "pods", Namespace: "ns", Name: "p", APIVersion: "v1", Subresource: "ephemeralcontainers"},
		"core/v1/namespaces/ns":                            {Resource: "namespaces", Name: "ns", APIVersion: "v1"},
		"core/v1/nodes/n1/proxy":                           {Resource: "nodes", Name: "n1", APIVersion: "v1", Subresource: "proxy"},
		"rbac.authorization.k8s.io/v1/clusterroles/x":      {Resource: "clusterroles", Name: "x", APIGroup: "rbac.authorization.k8s.io", APIVersion: "v1"},
		"core/v1/namespaces/ns/pods":                       {Resource: "pods", Namespace: "ns", APIVersion: "v1"},
		"core/v1/namespaces/ns/pods/p/exec/extra":          nil,
		"core/v1": nil,
		"":        nil,
		"//":      nil,
	} {
		got := gkeObjectRef(in)
		if (got == nil) != (want == nil) || (got != nil && *got != *want) {
			t.Errorf("%q: got %+v, want %+v", in, got, want)
		}
	}
}

func TestHTTPCode(t *testing.T) {
	for in, want := range map[int32]int32{0: 0, 7: 403, 16: 401, 5: 404, 3: 400, 13: 500, 14: 503, 4: 504, 403: 403, 101: 101, 42: 500, -1: 500} {
		if got := httpCode(in); got != want {
			t.Errorf("httpCode(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestDecodePubSub(t *testing.T) {
	payload := []byte(gkeExec)
	std := base64.StdEncoding.EncodeToString(payload)
	url := base64.RawURLEncoding.EncodeToString(append([]byte{0xfb, 0xff}, payload...))
	cases := []struct {
		in      string
		want    []byte
		ok, err bool
	}{
		{in: `{"message":{"data":"` + std + `","messageId":"1"},"subscription":"s"}`, want: payload, ok: true},
		{in: `{"data":"` + std + `","messageId":"1"}`, want: payload, ok: true},
		{in: `{"message":{"data":"` + url + `"}}`, want: append([]byte{0xfb, 0xff}, payload...), ok: true},
		{in: `{"message":{"data":"%%%"}}`, ok: true, err: true},
		{in: `{"message":{"attributes":{}}}`},
		{in: `{"data":7}`, err: true},
	}
	for _, tc := range cases {
		got, ok, err := decodePubSub([]byte(tc.in))
		if ok != tc.ok || (err != nil) != tc.err || !bytes.Equal(got, tc.want) {
			t.Errorf("%.60s: got %.40q ok=%v err=%v", tc.in, got, ok, err)
		}
	}
}

// TestParserGKEShapes drives the Parser with every GKE framing.
func TestParserGKEShapes(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte(gkeExec))
	for name, in := range map[string]string{
		"sink line":    gkeExec,
		"push":         `{"message":{"data":"` + b64 + `","messageId":"1"},"subscription":"projects/p/subscriptions/s"}`,
		"bare message": `{"data":"` + b64 + `","attributes":{"a":"b"}}`,
		"pull array":   `[{"ackId":"x","message":{"data":"` + b64 + `"}}]`,
		"push of push": `{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(`{"data":"`+b64+`"}`)) + `"}}`,
	} {
		p := NewParser(0)
		evs := p.ParseLine([]byte(in))
		if c := p.Counts(); len(evs) != 1 || evs[0].AuditID != "op-1" || c.SkippedTotal() != 0 {
			t.Errorf("%s: %d events, skipped %v", name, len(evs), c.SkippedByName())
		}
	}
	for name, in := range map[string]Reason{
		`{"message":{"data":"!!"}}`:                  ReasonBadEnvelope,
		`{"data":""}`:                                ReasonBadEnvelope,
		`{"protoPayload":{"methodName":"google.x"}}`: ReasonNotAnEvent,
		`{"message":{"attributes":{}}}`:              ReasonNotAnEvent,
	} {
		p := NewParser(0)
		p.ParseLine([]byte(name))
		if c := p.Counts(); c.Skipped[in] != 1 || c.SkippedTotal() != 1 {
			t.Errorf("%s: skipped %v, want %s", name, c.SkippedByName(), in)
		}
	}
}

func TestMergerMissingAuditID(t *testing.T) {
	mk := func(stage, uri, user string, rr time.Time) Event {
		return Event{Stage: stage, RequestURI: uri, Verb: "create", User: UserInfo{Username: user},
			ObjectRef:                &ObjectReference{Resource: "pods", Namespace: "ns", Name: "web", Subresource: SubresourceExec},
			RequestReceivedTimestamp: Time{rr}, StageTimestamp: Time{rr}}
	}
	t0 := time.Date(2026, 3, 4, 13, 0, 0, 0, time.UTC)
	const u = "/api/v1/namespaces/ns/pods/web/exec?command=sh"
	m := NewMerger(MergerConfig{})
	m.Add(mk(StageRequestReceived, u, "alice", t0))
	m.Add(mk(StageResponseStarted, u, "alice", t0))
	m.Add(mk(StageResponseStarted, u, "bob", t0))
	m.Add(mk(StageResponseStarted, u, "alice", t0.Add(time.Second)))
	// A client that chose the synthetic key as its Audit-ID is a conflict,
	// never a stage of the ID-less request.
	forged := mk(StageResponseComplete, u, "alice", t0)
	forged.AuditID = m.Records()[0].AuditID
	m.Add(forged)
	recs := m.Records()
	st := m.Stats()
	if len(recs) != 4 || st.Conflicts != 1 {
		t.Fatalf("records %d stats %+v", len(recs), st)
	}
	if !slices.Equal(recs[0].Stages, []string{StageRequestReceived, StageResponseStarted}) || recs[0].AuditID != forged.AuditID {
		t.Errorf("first record %s stages %v", recs[0].AuditID, recs[0].Stages)
	}
	for i, r := range recs[:3] {
		if !strings.HasPrefix(r.AuditID, MissingIDPrefix) || !r.HasFlag(vocab.FlagMissingAuditID) || (i > 0 && r.HasFlag(vocab.FlagAuditIDConflict)) {
			t.Errorf("record %d: %s flags %v", i, r.AuditID, r.Flags)
		}
	}
	if recs[3].HasFlag(vocab.FlagMissingAuditID) || !recs[3].HasFlag(vocab.FlagAuditIDConflict) {
		t.Errorf("forged record flags %v", recs[3].Flags)
	}
}
