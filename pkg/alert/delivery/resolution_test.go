package delivery

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	itu "github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/store"
)

// raisedAndResolved is a real alert and its resolution, which has the
// alert's ID, rule, severity, message and time, and for payload an opaque
// object the formatters need not read.
func raisedAndResolved(t *testing.T) (store.Alert, store.Alert) {
	t.Helper()
	a := nastyAlerts(t)[0]
	r := a
	r.Payload = json.RawMessage(`{"attribution":"audit_id","note":"a]b\"c"}`)
	r.Status, r.ResolvedAt = store.AlertResolved, t0.Add(90*time.Second+250*time.Millisecond)
	r.Resolution = `late_audit_record: "x"]\ |=y`
	return a, r
}

// sameResolution checks that got is r as JSON carries it: the alert's ID,
// time and message, and the resolution's status fields.
func sameResolution(t *testing.T, what string, got, r store.Alert) {
	t.Helper()
	if got.ID != r.ID || got.Status != store.AlertResolved || !got.ResolvedAt.Equal(r.ResolvedAt) ||
		got.Resolution != r.Resolution || !got.Time.Equal(r.Time) || got.Message != r.Message || got.Rule != r.Rule {
		t.Errorf("%s: %+v, want the resolution %+v", what, got, r)
	}
}

// TestResolutionThroughSpoolToFile: an alert and, submitted later, its
// resolution go through the spool to the file sink as two lines with the
// same ID, the second with status resolved, resolvedAt and resolution.
func TestResolutionThroughSpoolToFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "alerts.jsonl")
	spec, _ := ParseSinkSpec("file:" + out)
	fs, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(DispatcherConfig{SpoolDir: filepath.Join(dir, "spool")}, []Deliverer{fs},
		zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; d.Close() }()

	a, r := raisedAndResolved(t)
	lines := func() []string {
		b, err := os.ReadFile(out)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if i := strings.LastIndexByte(string(b), '\n'); i >= 0 {
			return strings.Split(string(b[:i]), "\n")
		}
		return nil
	}
	if err := d.Submit(ctx, []store.Alert{a}); err != nil {
		t.Fatal(err)
	}
	itu.Eventually(t, "the alert is in the file", func() bool { return len(lines()) == 1 })
	if err := d.Submit(ctx, []store.Alert{r}); err != nil {
		t.Fatal(err)
	}
	itu.Eventually(t, "the resolution is in the file", func() bool { return len(lines()) == 2 })
	var first, second store.Alert
	if err := json.Unmarshal([]byte(lines()[0]), &first); err != nil || first.ID != a.ID || first.Status != "" {
		t.Fatalf("first line %+v, %v: want the alert as raised", first, err)
	}
	if strings.Contains(lines()[0], `"status"`) || strings.Contains(lines()[0], `"resolvedAt"`) {
		t.Errorf("the raised alert carries status fields: %s", lines()[0])
	}
	if err := json.Unmarshal([]byte(lines()[1]), &second); err != nil {
		t.Fatal(err)
	}
	sameResolution(t, "second line", second, r)
	if string(second.Payload) != string(r.Payload) {
		t.Errorf("payload %s, want %s", second.Payload, r.Payload)
	}
}

// TestResolutionWebhookAndHEC: a webhook gets the resolution as one more
// alert object with the same ID; Splunk HEC as an event of its own whose
// time is when it was resolved.
func TestResolutionWebhookAndHEC(t *testing.T) {
	bodies := make(chan []byte, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
	}))
	defer srv.Close()
	a, r := raisedAndResolved(t)

	spec, _ := ParseSinkSpec("webhook:" + srv.URL + "/alerts")
	d, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]store.Alert{{a}, {r}} {
		if err := d.Deliver(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	var raised, resolved []store.Alert
	if err := json.Unmarshal(<-bodies, &raised); err != nil || len(raised) != 1 || raised[0].Status != "" {
		t.Fatalf("webhook alert %+v, %v", raised, err)
	}
	if err := json.Unmarshal(<-bodies, &resolved); err != nil || len(resolved) != 1 {
		t.Fatalf("webhook resolution %+v, %v", resolved, err)
	}
	sameResolution(t, "webhook", resolved[0], r)
	d.Close()

	spec, _ = ParseSinkSpec("splunk-hec:" + srv.URL + "/services/collector/event")
	d, err = NewDeliverer(spec, SinkOptions{Host: "node-1"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Deliver(context.Background(), []store.Alert{a, r}); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(<-bodies)))
	dec.DisallowUnknownFields()
	for i, want := range []store.Alert{a, r} {
		var ev struct {
			Time       float64     `json:"time"`
			Host       string      `json:"host"`
			Source     string      `json:"source"`
			Sourcetype string      `json:"sourcetype"`
			Event      store.Alert `json:"event"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("HEC event %d: %v", i, err)
		}
		if ev.Sourcetype != "correlator:alert" || ev.Event.ID != a.ID {
			t.Errorf("HEC event %d: %+v", i, ev)
		}
		wantTime := float64(want.Time.UnixMicro()) / 1e6
		if i == 1 {
			sameResolution(t, "HEC event", ev.Event, r)
			wantTime = float64(r.ResolvedAt.UnixMicro()) / 1e6
		}
		if ev.Time != wantTime {
			t.Errorf("HEC event %d time %v, want %v", i, ev.Time, wantTime)
		}
	}
}

// TestResolutionSyslog: over a real TCP listener, in RFC 5424 and in CEF,
// the resolution follows its alert with the same id (externalId), rule
// (MSGID, signature), status and why in the structured data (act, reason),
// when it was resolved as the TIMESTAMP (rt), and when the alert was
// raised (raisedAt, start). The alert itself carries none of these.
func TestResolutionSyslog(t *testing.T) {
	for _, format := range []string{FormatRFC5424, FormatCEF} {
		t.Run(format, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan []byte, 4)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					m, err := readOctetCounted(rd)
					if err != nil {
						close(got)
						return
					}
					got <- m
				}
			}()
			spec, err := ParseSinkSpec("syslog+tcp://" + ln.Addr().String() + "?format=" + format)
			if err != nil {
				t.Fatal(err)
			}
			d, err := NewDeliverer(spec, SinkOptions{Host: "node-1", Version: "1"}, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			a, r := raisedAndResolved(t)
			for _, batch := range [][]store.Alert{{a}, {r}} {
				if err := d.Deliver(context.Background(), batch); err != nil {
					t.Fatal(err)
				}
			}
			raised, resolved := mustParse(t, <-got), mustParse(t, <-got)
			for _, k := range []string{"status", "resolvedAt", "resolution", "raisedAt"} {
				if v, ok := raised.SD[sdID][k]; ok {
					t.Errorf("the raised alert has %s=%q", k, v)
				}
			}
			checkResolutionSyslog(t, resolved, &r, format)
		})
	}
}

func mustParse(t *testing.T, raw []byte) *rfc5424 {
	t.Helper()
	m, err := parseRFC5424(raw)
	if err != nil {
		t.Fatalf("not strict RFC 5424: %v\n%q", err, raw)
	}
	return m
}

func checkResolutionSyslog(t *testing.T, m *rfc5424, r *store.Alert, format string) {
	t.Helper()
	if m.MsgID != r.Rule {
		t.Errorf("MSGID %q, want the rule %q", m.MsgID, r.Rule)
	}
	if ts, err := time.Parse(time.RFC3339Nano, m.Timestamp); err != nil || !ts.Equal(r.ResolvedAt) {
		t.Errorf("TIMESTAMP %q, want when it was resolved, %v", m.Timestamp, r.ResolvedAt)
	}
	sd := m.SD[sdID]
	if sd["id"] != r.ID || sd["rule"] != r.Rule || sd["status"] != store.AlertResolved || sd["resolution"] != r.Resolution {
		t.Errorf("structured data %v", sd)
	}
	for k, want := range map[string]time.Time{"resolvedAt": r.ResolvedAt, "raisedAt": r.Time} {
		if ts, err := time.Parse(time.RFC3339Nano, sd[k]); err != nil || !ts.Equal(want) {
			t.Errorf("%s=%q, want %v", k, sd[k], want)
		}
	}
	if format == FormatRFC5424 {
		if want := "resolved (" + r.Resolution + "): " + strings.ToValidUTF8(r.Message, "\uFFFD"); m.Msg != want {
			t.Errorf("MSG %q, want %q", m.Msg, want)
		}
		return
	}
	hdr, ext, err := splitCEF(m.Msg)
	if err != nil {
		t.Fatalf("bad CEF: %v\n%q", err, m.Msg)
	}
	if hdr[4] != r.Rule || !strings.HasPrefix(hdr[5], "resolved (") {
		t.Errorf("CEF header %q", hdr)
	}
	if ext["externalId"] != r.ID || ext["act"] != store.AlertResolved || ext["reason"] != r.Resolution ||
		ext["rt"] != strconv.FormatInt(r.ResolvedAt.UnixMilli(), 10) || ext["start"] != strconv.FormatInt(r.Time.UnixMilli(), 10) {
		t.Errorf("CEF extension %v", ext)
	}
}
