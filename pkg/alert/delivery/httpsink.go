package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/execid/correlator/pkg/store"
)

// httpSink POSTs batches to a webhook (a JSON array of alerts,
// Content-Type application/json, optional bearer token) or to Splunk HEC
// (concatenated HEC event objects, "Authorization: Splunk TOKEN"). A
// resolution is one more alert object, with status "resolved"; its HEC
// time is when it was resolved (eventTime).
type httpSink struct {
	kind, url, name, host string
	opts                  SinkOptions
	client                *http.Client
}

func newHTTPSink(spec SinkSpec, opts SinkOptions) (*httpSink, error) {
	tc, err := opts.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("creating %s sink: %w", spec.Kind, err)
	}
	if _, err := opts.token(); err != nil { // fail at start, not at the first alert
		return nil, fmt.Errorf("creating %s sink: %w", spec.Kind, err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &httpSink{kind: spec.Kind, url: spec.URL, name: spec.String(), host: opts.Host, opts: opts,
		client: &http.Client{Transport: tr}}, nil
}

func (s *httpSink) Name() string { return s.name }

// hecEvent is Splunk HEC's event envelope.
type hecEvent struct {
	Time       float64      `json:"time"`
	Host       string       `json:"host,omitempty"`
	Source     string       `json:"source"`
	Sourcetype string       `json:"sourcetype"`
	Event      *store.Alert `json:"event"`
}

// encodeBatch builds the request body for a sink kind.
func encodeBatch(kind, host string, alerts []store.Alert) ([]byte, error) {
	if kind == KindWebhook {
		return json.Marshal(alerts)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range alerts {
		a := &alerts[i]
		ev := hecEvent{Time: float64(eventTime(a).UnixMicro()) / 1e6, Host: host, Source: "correlator",
			Sourcetype: "correlator:alert", Event: a}
		if err := enc.Encode(&ev); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func (s *httpSink) Deliver(ctx context.Context, alerts []store.Alert) error {
	body, err := encodeBatch(s.kind, s.host, alerts)
	if err != nil {
		return fmt.Errorf("encoding batch for %s: %w", s.kind, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("sending batch to %s: %w", s.kind, ErrRejected)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "correlator")
	tok, err := s.opts.token() // re-read, so a rotated token takes effect
	if err != nil {
		return fmt.Errorf("sending batch to %s: %w", s.kind, err)
	}
	if tok != "" {
		scheme := "Bearer "
		if s.kind == KindSplunkHEC {
			scheme = "Splunk "
		}
		req.Header.Set("Authorization", scheme+tok)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("sending batch to %s: %w", s.name, scrubURLError(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusBadRequest || c == http.StatusRequestEntityTooLarge || c == http.StatusUnprocessableEntity:
		return fmt.Errorf("sending batch to %s: status %d: %w", s.name, c, ErrRejected)
	default: // 401/403 too: the token file may be fixed
		return fmt.Errorf("sending batch to %s: status %d", s.name, c)
	}
}

// scrubURLError drops the URL (and its query, which may hold a key) from
// an http.Client error.
func scrubURLError(err error) error {
	if ue, ok := err.(interface{ Unwrap() error }); ok {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

func (s *httpSink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}
