package auditlog

import (
	"compress/gzip"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"
)

// ErrBusy is what a Sink returns to ask the sender to come back later; the
// webhook answers 429 and the apiserver retries with backoff.
var ErrBusy = errors.New("audit pipeline busy")

// errUnsupportedEncoding refuses a Content-Encoding other than gzip.
var errUnsupportedEncoding = errors.New("unsupported content encoding")

// DefaultMaxBodyBytes is above the apiserver's 10 MiB batch split
// (--audit-webhook-truncate-max-batch-size) with room for framing.
const DefaultMaxBodyBytes = 16 << 20

// WebhookConfig configures the audit webhook receiver.
type WebhookConfig struct {
	Listen string // host:port for the standalone server
	// MaxBodyBytes bounds a request body, after gzip inflation too; <= 0
	// means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	MaxLineBytes int
	// MaxConns caps the standalone server's open connections; <= 0 means
	// DefaultWebhookMaxConns.
	MaxConns int
	// MaxInflightBytes bounds the bodies all requests hold at once (each
	// reserves its Content-Length, or MaxBodyBytes when compressed or
	// unknown); a request beyond it gets 429. <= 0 means 4 * MaxBodyBytes.
	MaxInflightBytes int64
	// Tokens, if set, decides the "Authorization: Bearer <token>" senders
	// must present (the kubeconfig's user token): an authn.File, reloaded
	// when it is rotated. It takes precedence over BearerToken.
	Tokens TokenChecker
	// BearerToken is a fixed token, for embedding and tests.
	BearerToken string
	// TLS for the standalone server; ClientCAFile turns on client
	// certificate verification (the kubeconfig's client-certificate).
	TLSCertFile, TLSKeyFile, ClientCAFile string
	// FirehoseKeys, if set, decides the access keys Amazon Data Firehose
	// deliveries (X-Amz-Firehose-Access-Key) may carry: an authn.File. It
	// takes precedence over FirehoseAccessKey. Without either, Firehose
	// deliveries are refused.
	FirehoseKeys TokenChecker
	// FirehoseAccessKey is a fixed access key, for embedding and tests.
	FirehoseAccessKey string
}

// TokenChecker accepts or refuses a presented bearer token (authn.Checker).
type TokenChecker interface {
	Accepts(token string) bool
}

// authenticated reports whether the receiver checks its senders at all.
func (c WebhookConfig) authenticated() bool {
	return c.Tokens != nil || c.BearerToken != "" || c.ClientCAFile != "" || c.firehose()
}

// Webhook result labels (correlator_audit_webhook_requests_total).
const (
	resultOK          = "ok"
	resultBadRequest  = "bad_request"
	resultTooLarge    = "too_large"
	resultUnsupported = "unsupported_media_type"
	resultUnauth      = "unauthorized"
	resultMethod      = "method_not_allowed"
	resultBusy        = "busy"
	resultSinkError   = "sink_error"
)

// Refusal reasons (correlator_audit_webhook_refused_total): why a delivery
// from an accepted sender was answered with an error, so not taken in.
const (
	refusedTooLarge    = "body_too_large"       // 413: over MaxBodyBytes, sent or inflated
	refusedEncoding    = "unsupported_encoding" // 415: a Content-Encoding other than gzip
	refusedUnreadable  = "unreadable_body"      // 400: the body or its gzip stream broke off
	refusedUndecodable = "undecodable"          // 400: no audit event in it could be decoded
	refusedBusy        = "busy"                 // 429: the sink asked to come back later
	refusedSinkError   = "sink_error"           // 503: the sink failed
)

var refusalReasons = []string{refusedTooLarge, refusedEncoding, refusedUnreadable, refusedUndecodable, refusedBusy, refusedSinkError}

// WebhookHandler receives the apiserver's audit webhook POSTs (an EventList
// per request; also an Event, an array or JSON lines). It replies 2xx only
// once the sink accepted the events, so the apiserver retries otherwise.
type WebhookHandler struct {
	cfg     WebhookConfig
	sink    Sink
	dec     *Decoder // for skip logging and metrics only
	log     zerolog.Logger
	metrics *Metrics
	// inflight is MaxInflightBytes of body, shared by every request.
	inflight *semaphore.Weighted
}

// NewWebhookHandler returns an http.Handler feeding sink; mount it anywhere.
func NewWebhookHandler(cfg WebhookConfig, sink Sink, log zerolog.Logger, m *Metrics) *WebhookHandler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxInflightBytes <= 0 {
		cfg.MaxInflightBytes = 4 * cfg.MaxBodyBytes
	}
	cfg.MaxInflightBytes = max(cfg.MaxInflightBytes, cfg.MaxBodyBytes)
	log = log.With().Str("component", "auditlog.webhook").Logger()
	return &WebhookHandler{
		cfg: cfg, sink: sink, log: log, metrics: m, inflight: semaphore.NewWeighted(cfg.MaxInflightBytes),
		dec: &Decoder{cfg: DecoderConfig{Source: "webhook", MaxLineBytes: cfg.MaxLineBytes}, log: log, metrics: m},
	}
}

// reply answers code; errors carry a JSON body {"error": msg}, the API's
// shape, so the webhook reads the same on either listener. A Firehose
// delivery gets the answer Firehose expects (replyFirehose).
func (h *WebhookHandler) reply(w http.ResponseWriter, r *http.Request, code int, result, msg string) {
	h.metrics.webhook(result)
	if isFirehose(r) {
		replyFirehose(w, r, code, msg)
		return
	}
	if code < 300 {
		w.WriteHeader(code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}

// refuse answers an error to an accepted sender and counts the evidence
// refused.
func (h *WebhookHandler) refuse(w http.ResponseWriter, r *http.Request, code int, result, reason, msg string) {
	h.metrics.refused(reason)
	h.reply(w, r, code, result, msg)
}

// ServeHTTP implements http.Handler.
func (h *WebhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reply(w, r, http.StatusMethodNotAllowed, resultMethod, "POST audit events here")
		return
	}
	if !h.senderOK(r) {
		if !isFirehose(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="audit"`)
		}
		h.reply(w, r, http.StatusUnauthorized, resultUnauth, "unauthorized")
		return
	}
	// Concurrent senders share one memory budget: past it they are asked
	// to come back, as when the pipeline is busy.
	weight := h.reserve(r)
	if !h.inflight.TryAcquire(weight) {
		w.Header().Set("Retry-After", "1")
		h.refuse(w, r, http.StatusTooManyRequests, resultBusy, refusedBusy, "busy")
		return
	}
	defer h.inflight.Release(weight)
	body, err := h.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			h.refuse(w, r, http.StatusRequestEntityTooLarge, resultTooLarge, refusedTooLarge,
				fmt.Sprintf("request body over %d bytes", h.cfg.MaxBodyBytes))
		case errors.Is(err, errUnsupportedEncoding):
			w.Header().Set("Accept-Encoding", "gzip")
			h.refuse(w, r, http.StatusUnsupportedMediaType, resultUnsupported, refusedEncoding, err.Error())
		default:
			h.log.Warn().Err(err).Str("remote", r.RemoteAddr).Msg("reading webhook body")
			h.refuse(w, r, http.StatusBadRequest, resultBadRequest, refusedUnreadable, "unreadable body")
		}
		return
	}
	p := NewParser(h.dec.cfg.MaxLineBytes)
	evs := p.ParseDocument(body)
	acc := accounter{d: h.dec, name: "webhook " + r.RemoteAddr, p: p}
	acc.done(0)
	acc.flush()
	c := p.Counts()
	if c.Events == 0 && c.SkippedTotal() > 0 {
		h.refuse(w, r, http.StatusBadRequest, resultBadRequest, refusedUndecodable, "no audit events could be decoded")
		return
	}
	if len(evs) > 0 {
		if err := h.sink(r.Context(), evs); err != nil {
			if errors.Is(err, ErrBusy) {
				w.Header().Set("Retry-After", "5")
				h.refuse(w, r, http.StatusTooManyRequests, resultBusy, refusedBusy, "busy")
				return
			}
			h.log.Warn().Err(err).Msg("audit sink refused webhook events")
			h.refuse(w, r, http.StatusServiceUnavailable, resultSinkError, refusedSinkError, "events not accepted")
			return
		}
	}
	h.reply(w, r, http.StatusOK, resultOK, "")
}

// reserve is what a request may hold: its declared length when the body
// is plain, else the most any body may inflate to.
func (h *WebhookHandler) reserve(r *http.Request) int64 {
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	if (enc == "" || enc == "identity") && r.ContentLength >= 0 {
		return min(r.ContentLength+1, h.cfg.MaxBodyBytes)
	}
	return h.cfg.MaxBodyBytes
}

// tokenOK compares in constant time; the token is never logged.
func (h *WebhookHandler) tokenOK(header string) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if tok = strings.TrimSpace(tok); !ok || tok == "" {
		return false
	}
	if h.cfg.Tokens != nil {
		return h.cfg.Tokens.Accepts(tok)
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.BearerToken)) == 1
}

// readBody reads the body, inflating gzip, and never holds more than
// MaxBodyBytes+1 bytes of it: a longer one is an *http.MaxBytesError.
func (h *WebhookHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return readAtMost(body, h.cfg.MaxBodyBytes, r.ContentLength)
	case "gzip", "x-gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("opening gzip body: %w", err)
		}
		defer gz.Close()
		b, err := readAtMost(gz, h.cfg.MaxBodyBytes, -1)
		if err != nil {
			return nil, fmt.Errorf("inflating gzip body: %w", err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("%w %q: send it plain or gzip", errUnsupportedEncoding, enc)
	}
}

// readAtMost reads r to its end into at most limit+1 bytes (sizeHint+1 when
// known, else growing by doubling up to that), so neither a lying
// Content-Length nor a gzip bomb makes it hold more. Past limit it returns
// an *http.MaxBytesError.
func readAtMost(r io.Reader, limit, sizeHint int64) ([]byte, error) {
	size := int64(512)
	if sizeHint >= 0 {
		size = sizeHint + 1 // room to see EOF without growing
	}
	b := make([]byte, 0, min(size, limit+1))
	for {
		if len(b) == cap(b) {
			if int64(len(b)) > limit {
				return nil, &http.MaxBytesError{Limit: limit}
			}
			grown := make([]byte, len(b), min(2*int64(cap(b))+512, limit+1))
			copy(grown, b)
			b = grown
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(b)) > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return b, nil
}
