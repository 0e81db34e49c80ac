package bridge

import (
	"bytes"
	"net/http"
	"testing"
)

// BenchmarkMutateExec: the decision alone, as the handler calls it, for a
// typical `kubectl exec -it pod -- sh`.
func BenchmarkMutateExec(b *testing.B) {
	m, err := NewMutator(k, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	req := execRequest(b, "app", "sh", "-c", "ls -la /var/log")
	b.ReportAllocs()
	for b.Loop() {
		if d := m.Decide(b.Context(), req); d.Patch == nil {
			b.Fatal(d)
		}
	}
}

// BenchmarkBridgeHTTPS: one AdmissionReview end to end over a kept-alive
// HTTPS connection on loopback, as the apiserver reuses its connections.
func BenchmarkBridgeHTTPS(b *testing.B) {
	ts := startServer(b, nil)
	body := review(b, execRequest(b, "app", "sh", "-c", "ls -la /var/log"))
	b.ReportAllocs()
	for b.Loop() {
		resp, err := ts.http.Post(ts.url+MutatePath, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}
