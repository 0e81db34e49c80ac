package auditlog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// addSampleSeeds seeds a fuzzer with the lines of the committed samples.
func addSampleSeeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(samplesDir, "*.log"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil || len(b) > 64<<10 {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			f.Add(line)
		}
	}
}

func checkParserInvariants(t *testing.T, p *Parser, evs []Event) {
	c := p.Counts()
	if c.Streaming > c.Events {
		t.Fatalf("streaming %d > events %d", c.Streaming, c.Events)
	}
	for i := range evs {
		if !IsStreaming(&evs[i]) {
			t.Fatalf("non-streaming event returned: %+v", evs[i])
		}
	}
}

func FuzzParseLine(f *testing.F) {
	addSampleSeeds(f)
	for _, l := range streamingLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		p := NewParser(1 << 20)
		evs := p.ParseLine(line)
		checkParserInvariants(t, p, evs)
		// The fast path may skip decoding, never a streaming event.
		all := NewParser(1 << 20)
		all.All = true
		all.ParseLine(line)
		if got, want := p.Counts().Streaming, all.Counts().Streaming; got != want {
			t.Fatalf("fast path found %d streaming events, a full decode %d", got, want)
		}
		m := NewMerger(MergerConfig{MaxRecords: 4})
		for _, ev := range evs {
			m.Add(ev)
		}
		evs = p.ParseDocument(line)
		checkParserInvariants(t, p, evs)
	})
}

func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(samplesDir, "*"))
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil && len(b) < 8<<10 && !strings.HasSuffix(name, ".gz") {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		d := NewDecoder(DecoderConfig{MaxLineBytes: 1 << 20}, zerolog.Nop(), nil)
		m := NewMerger(MergerConfig{MaxRecords: 8})
		c, _ := d.Decode(bytes.NewReader(input), "fuzz", func(evs []Event) error {
			for _, ev := range evs {
				if r := m.Add(ev); len(r.Updated) == 0 && !r.Duplicate {
					t.Fatalf("streaming event neither merged nor duplicate")
				}
			}
			return nil
		})
		if c.Streaming > c.Events {
			t.Fatalf("streaming %d > events %d", c.Streaming, c.Events)
		}
		if s := m.Stats(); s.Records > 8 {
			t.Fatalf("merger holds %d records over its cap", s.Records)
		}
	})
}

func FuzzRequestURI(f *testing.F) {
	for _, s := range []string{
		"/api/v1/namespaces/ns/pods/p/exec?command=sh&command=-c&command=echo+a%26b&container=c&stdin=true&tty=1",
		"/api/v1/namespaces/ns/pods/p/portforward?ports=80&ports=443",
		"/api/v1/namespaces/ns/pods/p/exec?command=%zz&env=A%3Db",
		"/api/v1/namespaces/%2F/pods/p/attach?container=&&&==",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		ref, p := parseRequestURI(uri)
		_, query, _ := strings.Cut(uri, "?")
		n := 0
		for kv := range strings.SplitSeq(query, "&") {
			k, _, _ := strings.Cut(kv, "=")
			if k, _ = queryUnescape(k); k == "command" {
				n++
			}
		}
		if len(p.Command) != n {
			t.Fatalf("%d commands parsed, %d command= params", len(p.Command), n)
		}
		if ref.Pod == "" && (ref.Namespace != "" || ref.Subresource != "") {
			t.Fatalf("partial path ref %+v", ref)
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2026-01-02T03:04:05.600000Z", "2022-11-29 00:09:04.38", "2021-06-01T14:00:09.123456789+02:00",
		"2018-10-26T13:38:34Z", "2026-03-04T10:15:31.0000000Z", "2026-01-02T03:04:05-0530", "2026-02-30T00:00:00Z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseTime([]byte(s))
		if err != nil || v.IsZero() {
			return
		}
		back, err := parseTime([]byte(v.Format(time.RFC3339Nano)))
		if err != nil || !back.Equal(v) {
			t.Fatalf("%q -> %v does not round-trip: %v %v", s, v, back, err)
		}
	})
}

// FuzzWebhookBody drives the webhook handler with any body under any
// Content-Encoding: it never panics, answers only what the contract allows
// (the sink here always accepts), inflates nothing past the bound, and
// counts every request once and every refusal once.
func FuzzWebhookBody(f *testing.F) {
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[]}`), "")
	f.Add([]byte{0x1f, 0x8b, 0x08, 0x00}, "gzip")
	f.Add([]byte("not json"), "br")
	const maxBody = 16 << 10
	f.Fuzz(func(t *testing.T, body []byte, encoding string) {
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		var taken int
		sink := func(_ context.Context, evs []Event) error { taken += len(evs); return nil }
		h := NewWebhookHandler(WebhookConfig{MaxBodyBytes: maxBody, MaxLineBytes: 1 << 20}, sink, zerolog.Nop(), m)
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header.Set("Content-Encoding", encoding)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch code := rec.Code; code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			if taken != 0 {
				t.Fatalf("%d after the sink took %d events", code, taken)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%d with a body that is not JSON: %q", code, rec.Body.String())
			}
		default:
			t.Fatalf("status %d", code)
		}
		if len(body) > maxBody && rec.Code != http.StatusRequestEntityTooLarge && rec.Code != http.StatusUnsupportedMediaType {
			t.Fatalf("a %d-byte body over the %d bound answered %d", len(body), maxBody, rec.Code)
		}
		var requests, refused float64
		for _, r := range []string{resultOK, resultBadRequest, resultTooLarge, resultUnsupported} {
			requests += promtest.ToFloat64(m.webhookRequests.WithLabelValues(r))
		}
		for _, r := range refusalReasons {
			refused += promtest.ToFloat64(m.webhookRefused.WithLabelValues(r))
		}
		if requests != 1 || refused != map[bool]float64{true: 1}[rec.Code != http.StatusOK] {
			t.Fatalf("status %d counted as %v requests, %v refusals", rec.Code, requests, refused)
		}
	})
}

// FuzzGKE drives the GKE LogEntry and Pub/Sub decoders: they never panic,
// only Kubernetes entries become events, a Pub/Sub payload survives a
// re-encoding, and the Parser agrees with them.
func FuzzGKE(f *testing.F) {
	f.Add([]byte(gkeExec))
	f.Add([]byte(`{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(gkeExec)) + `"}}`))
	f.Add([]byte(`{"protoPayload":{"methodName":"io.k8s.core.v1.pods.exec.get","resourceName":"core/v1/namespaces/a/pods/b/exec?command=sh"},"operation":{"last":true}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		ev, err := parseGKEEntry(in)
		if err == nil {
			if strings.Contains(ev.Verb, ".") || (ev.ObjectRef != nil && ev.ObjectRef.Resource == "") {
				t.Fatalf("entry decoded to %+v", ev.ObjectRef)
			}
			if IsStreaming(&ev) {
				if r := newRecord(&ev); r.Pod != ev.ObjectRef.Name {
					t.Fatalf("record pod %q, ref %q", r.Pod, ev.ObjectRef.Name)
				}
			}
		}
		if payload, ok, err := decodePubSub(in); ok && err == nil {
			env, _ := json.Marshal(map[string]any{"message": map[string]string{"data": base64.StdEncoding.EncodeToString(payload)}})
			if back, ok, err := decodePubSub(env); !ok || err != nil || !bytes.Equal(back, bytes.TrimPrefix(payload, utf8BOM)) {
				t.Fatalf("payload %q did not survive re-encoding: %q %v %v", payload, back, ok, err)
			}
		}
		p := NewParser(1 << 20)
		checkParserInvariants(t, p, p.ParseLine(in))
	})
}
