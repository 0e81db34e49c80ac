package auditlog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/net/netutil"

	"github.com/execid/correlator/pkg/authn"
)

// DefaultWebhookMaxConns caps the standalone receiver's connections: each
// apiserver keeps one or a few; beyond the cap clients wait in the kernel's
// accept queue instead of taking descriptors and body buffers.
const DefaultWebhookMaxConns = 64

// The standalone server's timeouts. A batch is up to MaxBodyBytes, so the
// body gets a generous minute; the write bound covers reading it and the
// sink, so it must exceed the read bound.
const (
	webhookReadHeaderTimeout = 10 * time.Second
	webhookReadTimeout       = time.Minute
	webhookWriteTimeout      = 90 * time.Second
	webhookIdleTimeout       = 2 * time.Minute
)

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
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultWebhookMaxConns
	}
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

func (s *WebhookServer) httpServer(sink Sink) *http.Server {
	return &http.Server{
		Handler:           NewWebhookHandler(s.cfg, sink, s.log, s.metrics),
		ReadHeaderTimeout: webhookReadHeaderTimeout,
		ReadTimeout:       webhookReadTimeout,
		WriteTimeout:      webhookWriteTimeout,
		IdleTimeout:       webhookIdleTimeout,
		TLSConfig:         s.tls,
		// Handshake failures and the like, at the level zerolog gives writes.
		ErrorLog: log.New(s.log.With().Str("source", "net/http").Logger(), "", 0),
	}
}

// Serve serves on ln, at most MaxConns connections at once, until ctx ends,
// then shuts down gracefully.
func (s *WebhookServer) Serve(ctx context.Context, ln net.Listener, sink Sink) error {
	srv := s.httpServer(sink)
	// The cap counts TCP connections, so it sits under the TLS layer.
	ln = netutil.LimitListener(ln, s.cfg.MaxConns)
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.log.Info().Str("addr", ln.Addr().String()).Bool("tls", s.tls != nil).Int("max_conns", s.cfg.MaxConns).Msg("audit webhook listening")
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
