package store

import "testing"

func TestRequestKey(t *testing.T) {
	key := func(ev string) string { r := AuditRecord{Event: []byte(ev)}; return r.RequestKey() }
	victim := `{"auditID":"x","stage":"ResponseStarted","requestURI":"/exec","verb":"create",` +
		`"user":{"username":"alice","groups":["a"]},"sourceIPs":["10.0.0.1"],"requestReceivedTimestamp":"2026-03-01T12:00:00.123456Z"}`
	for _, tc := range []struct {
		name, a, b string
		same       bool
	}{
		{"redelivery", victim, victim, true},
		{"other stage of the request", victim, `{"stage":"ResponseComplete","auditID":"x","requestURI":"/exec","verb":"create",` +
			`"user":{"groups":["a"],"username":"alice"},"sourceIPs":["10.0.0.1"],"requestReceivedTimestamp":"2026-03-01T12:00:00.123456000Z","responseStatus":{"code":101}}`, true},
		{"other user", victim, `{"requestURI":"/exec","verb":"create","user":{"username":"mallory","groups":["a"]},` +
			`"sourceIPs":["10.0.0.1"],"requestReceivedTimestamp":"2026-03-01T12:00:00.123456Z"}`, false},
		{"other source", victim, `{"requestURI":"/exec","verb":"create","user":{"username":"alice","groups":["a"]},` +
			`"sourceIPs":["10.0.0.9"],"requestReceivedTimestamp":"2026-03-01T12:00:00.123456Z"}`, false},
		{"other time", victim, `{"requestURI":"/exec","verb":"create","user":{"username":"alice","groups":["a"]},` +
			`"sourceIPs":["10.0.0.1"],"requestReceivedTimestamp":"2026-03-01T12:00:07Z"}`, false},
		{"not an event", `{"x":1}`, `{"x":2}`, false},
		{"not JSON", `garbage`, `garbage`, true},
		{"empty is null", ``, `null`, true},
	} {
		if got := key(tc.a) == key(tc.b); got != tc.same {
			t.Errorf("%s: same key = %v, want %v", tc.name, got, tc.same)
		}
	}
}
