package auditlog

import (
	"compress/gzip"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/authn"
)

// ErrBusy is what a Sink returns to ask the sender to come back later; the
// webhook answers 429 and the apiserver retries with backoff.
var ErrBusy = errors.New("audit pipeline busy")

// DefaultMaxBodyBytes is above the apiserver's 10 MiB batch split
// (--audit-webhook-truncate-max-batch-size) with room for framing.
const DefaultMaxBodyBytes = 16 << 20

// WebhookConfig configures the audit webhook receiver.
type WebhookConfig struct {
	Listen       string // host:port for the standalone server
	MaxBodyBytes int64  // <= 0 means DefaultMaxBodyBytes
	MaxLineBytes int
	// Tokens, if set, decides the "Authorization: Bearer <token>" senders
	// must present (the kubeconfig's user token): an authn.File, reloaded
	// when it is rotated. It takes precedence over BearerToken.
	Tokens TokenChecker
	// BearerToken is a fixed token, for embedding and tests.
	BearerToken string
	// TLS for the standalone server; ClientCAFile turns on client
	// certificate verification (the kubeconfig's client-certificate).
	TLSCertFile, TLSKeyFile, ClientCAFile string
}

// TokenChecker accepts or refuses a presented bearer token (authn.Checker).
type TokenChecker interface {
	Accepts(token string) bool
}

// authenticated reports whether the receiver checks its senders at all.
func (c WebhookConfig) authenticated() bool {
	return c.Tokens != nil || c.BearerToken != "" || c.ClientCAFile != ""
}

// Webhook result labels.
const (
	resultOK         = "ok"
	resultBadRequest = "bad_request"
	resultTooLarge   = "too_large"
	resultUnauth     = "unauthorized"
	resultMethod     = "method_not_allowed"
	resultBusy       = "busy"
	resultSinkError  = "sink_error"
)

// WebhookHandler receives the apiserver's audit webhook POSTs (an EventList
// per request; also an Event, an array or JSON lines). It replies 2xx only
// once the sink accepted the events, so the apiserver retries otherwise.
type WebhookHandler struct {
	cfg     WebhookConfig
	sink    Sink
	dec     *Decoder // for skip logging and metrics only
	log     zerolog.Logger
	metrics *Metrics
}

// NewWebhookHandler returns an http.Handler feeding sink; mount it anywhere.
func NewWebhookHandler(cfg WebhookConfig, sink Sink, log zerolog.Logger, m *Metrics) *WebhookHandler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	log = log.With().Str("component", "auditlog.webhook").Logger()
	return &WebhookHandler{
		cfg: cfg, sink: sink, log: log, metrics: m,
		dec: &Decoder{cfg: DecoderConfig{Source: "webhook", MaxLineBytes: cfg.MaxLineBytes}, log: log, metrics: m},
	}
}

func (h *WebhookHandler) reply(w http.ResponseWriter, code int, result, msg string) {
	h.metrics.webhook(result)
	if code >= 300 {
		http.Error(w, msg, code)
		return
	}
	w.WriteHeader(code)
}

// ServeHTTP implements http.Handler.
func (h *WebhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reply(w, http.StatusMethodNotAllowed, resultMethod, "POST audit events here")
		return
	}
	if (h.cfg.Tokens != nil || h.cfg.BearerToken != "") && !h.tokenOK(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="audit"`)
		h.reply(w, http.StatusUnauthorized, resultUnauth, "unauthorized")
		return
	}
	body, err := h.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.reply(w, http.StatusRequestEntityTooLarge, resultTooLarge, "request body too large")
			return
		}
		h.log.Warn().Err(err).Str("remote", r.RemoteAddr).Msg("reading webhook body")
		h.reply(w, http.StatusBadRequest, resultBadRequest, "unreadable body")
		return
	}
	p := NewParser(h.dec.cfg.MaxLineBytes)
	evs := p.ParseDocument(body)
	acc := accounter{d: h.dec, name: "webhook " + r.RemoteAddr, p: p}
	acc.done(0)
	acc.flush()
	c := p.Counts()
	if c.Events == 0 && c.SkippedTotal() > 0 {
		h.reply(w, http.StatusBadRequest, resultBadRequest, "no audit events could be decoded")
		return
	}
	if len(evs) > 0 {
		if err := h.sink(r.Context(), evs); err != nil {
			if errors.Is(err, ErrBusy) {
				w.Header().Set("Retry-After", "5")
				h.reply(w, http.StatusTooManyRequests, resultBusy, "busy")
				return
			}
			h.log.Warn().Err(err).Msg("audit sink refused webhook events")
			h.reply(w, http.StatusServiceUnavailable, resultSinkError, "events not accepted")
			return
		}
	}
	h.reply(w, http.StatusOK, resultOK, "")
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

func (h *WebhookHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	var rd io.Reader = body
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		gz, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("opening gzip body: %w", err)
		}
		defer gz.Close()
		// Bound the inflated size too.
		rd = io.LimitReader(gz, h.cfg.MaxBodyBytes+1)
	}
	b, err := io.ReadAll(rd)
	if err == nil && int64(len(b)) > h.cfg.MaxBodyBytes {
		err = &http.MaxBytesError{Limit: h.cfg.MaxBodyBytes}
	}
	return b, err
}

// WebhookServer is the standalone receiver (--audit-webhook-listen).
type WebhookServer struct {
	cfg     WebhookConfig
	log     zerolog.Logger
	metrics *Metrics
	tls     *tls.Config
}

// NewWebhookServer loads the TLS material, if any. A listener that checks
// neither a token nor a client certificate is refused unless cfg.Listen is
// a loopback address: anyone who reaches it could forge sessions.
func NewWebhookServer(cfg WebhookConfig, log zerolog.Logger, m *Metrics) (*WebhookServer, error) {
	s := &WebhookServer{cfg: cfg, log: log.With().Str("component", "auditlog.webhook").Logger(), metrics: m}
	if !cfg.authenticated() && !authn.IsLoopback(cfg.Listen) {
		return nil, fmt.Errorf("configuring audit webhook on %q: %w: give a token file or a client CA", cfg.Listen, authn.ErrInsecureListener)
	}
	if cfg.TLSCertFile == "" && cfg.authenticated() && !authn.IsLoopback(cfg.Listen) {
		s.log.Warn().Str("addr", cfg.Listen).Msg("audit webhook token travels in clear text: give a server certificate")
	}
	if cfg.TLSCertFile == "" && cfg.ClientCAFile != "" {
		return nil, errors.New("configuring audit webhook: client CA needs a server certificate")
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading webhook certificate: %w", err)
		}
		s.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		if cfg.ClientCAFile != "" {
			pem, err := os.ReadFile(cfg.ClientCAFile)
			if err != nil {
				return nil, fmt.Errorf("reading webhook client CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("parsing webhook client CA %s: no certificates", cfg.ClientCAFile)
			}
			s.tls.ClientCAs = pool
			s.tls.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return s, nil
}

// Run listens on cfg.Listen and serves until ctx ends.
func (s *WebhookServer) Run(ctx context.Context, sink Sink) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening for audit webhook: %w", err)
	}
	return s.Serve(ctx, ln, sink)
}

// Serve serves on ln until ctx ends, then shuts down gracefully.
func (s *WebhookServer) Serve(ctx context.Context, ln net.Listener, sink Sink) error {
	srv := &http.Server{
		Handler:           NewWebhookHandler(s.cfg, sink, s.log, s.metrics),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		TLSConfig:         s.tls,
		// Handshake failures and the like, at the level zerolog gives writes.
		ErrorLog: log.New(s.log.With().Str("source", "net/http").Logger(), "", 0),
	}
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.log.Info().Str("addr", ln.Addr().String()).Bool("tls", s.tls != nil).Msg("audit webhook listening")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving audit webhook: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("stopping audit webhook: %w", err)
	}
	return nil
}
