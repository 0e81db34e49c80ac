// Package api serves correlator's REST API: sessions, processes and alerts
// for incident responders, plus health, metrics and the audit webhook.
package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// Reader is the part of a store the API reads.
type Reader interface {
	ListSessions(ctx context.Context, f store.SessionFilter) ([]join.Session, string, error)
	GetSession(ctx context.Context, auditID string) (store.SessionDetail, error)
	ListProcesses(ctx context.Context, f store.ProcessFilter) ([]join.Process, string, error)
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]store.Alert, string, error)
}

// Config wires the optional parts of the API.
type Config struct {
	// Auth guards /api/v1 except the OpenAPI document. Nil means no
	// authentication; the caller allows that only on loopback.
	Auth Authenticator
	// Webhook receives kube-apiserver's audit webhook at WebhookPath; it
	// carries its own authentication (a bearer token or client certs).
	Webhook http.Handler
	// Metrics serves /metrics.
	Metrics http.Handler
	// Ready reports whether the agent is ready (probes attached, store open).
	Ready func() error
	// Now is the clock for relative times ("since=1h"); time.Now if nil.
	Now func() time.Time
	// Latency times the queries (NewLatency); nil: not timed.
	Latency *Latency
}

// WebhookPath is where kube-apiserver's audit webhook posts.
const WebhookPath = "/api/v1/audit/webhook"

//go:embed openapi.json
var openAPI []byte

type server struct {
	r   Reader
	cfg Config
	log zerolog.Logger
}

// NewHandler returns the API's handler.
func NewHandler(r Reader, cfg Config, log zerolog.Logger) http.Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lat := cfg.Latency
	s := &server{r: r, cfg: cfg, log: log.With().Str("component", "api").Logger()}
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/sessions", lat.timed("sessions", s.auth(list(s, filterParams, sessionFilter, r.ListSessions))))
	mux.Handle("GET /api/v1/sessions/{auditID}", lat.timed("session", s.auth(s.getSession)))
	mux.Handle("GET /api/v1/processes", lat.timed("processes",
		s.auth(list(s, processParams, processFilter, s.listProcesses))))
	mux.Handle("GET /api/v1/alerts", lat.timed("alerts", s.auth(list(s, alertParams, alertFilter, r.ListAlerts))))
	mux.HandleFunc("GET /api/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPI)
	})
	if cfg.Webhook != nil {
		mux.Handle("POST "+WebhookPath, cfg.Webhook)
	}
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.ready)
	return jsonErrors(mux)
}

func (s *server) auth(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Auth != nil {
			user, err := s.cfg.Auth.Authenticate(r)
			switch {
			case errors.Is(err, ErrUnauthenticated):
				w.Header().Set("WWW-Authenticate", `Bearer realm="correlator"`)
				writeError(w, http.StatusUnauthorized, err)
				return
			case errors.Is(err, ErrForbidden):
				writeError(w, http.StatusForbidden, err)
				return
			case err != nil:
				s.log.Error().Err(err).Msg("authenticating request")
				writeError(w, http.StatusServiceUnavailable, errors.New("authentication backend unavailable"))
				return
			}
			s.log.Debug().Str("user", user).Str("path", r.URL.Path).Msg("request")
		}
		h(w, r)
	})
}

func (s *server) ready(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
	}
	w.Write([]byte("ok\n"))
}

// writeJSON encodes v whole before it writes, and says its length: the
// answer leaves with no closing chunk written after the handler returns
// (make soak's client waited up to a few ms at p99 past an answer's first
// byte for its last), and a value that will not encode is a 500, not a
// 200 cut short.
func writeJSON(w http.ResponseWriter, code int, v any) {
	var b bytes.Buffer
	if err := encodeJSON(&b, v); err != nil {
		code = http.StatusInternalServerError
		b.Reset()
		encodeJSON(&b, errorBody("encoding the response failed"))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

func encodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// errorBody is the shape of every error response.
func errorBody(msg string) map[string]string { return map[string]string{"error": msg} }

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, errorBody(err.Error()))
}

// storeError maps store errors to status codes; internals are logged, not sent.
func (s *server) storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, errors.New("no such session"))
	case errors.Is(err, store.ErrInvalidCursor):
		writeError(w, http.StatusBadRequest, errors.New("invalid cursor"))
	default:
		s.log.Error().Err(err).Msg("querying store")
		writeError(w, http.StatusInternalServerError, errors.New("querying the store failed"))
	}
}
