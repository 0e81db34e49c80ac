package bridge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// Server is the webhook's HTTPS server: MutatePath, /healthz, /readyz and,
// when given, /metrics.
type Server struct {
	cfg     Config
	handler http.Handler
	metrics http.Handler
	certs   *CertReloader
	log     zerolog.Logger
}

// NewServer builds the server. metrics, when not nil, is served at
// /metrics on the webhook's listener (MetricsListen empty) or on its own
// plain-HTTP listener.
func NewServer(cfg Config, handler, metrics http.Handler, log zerolog.Logger, m *Metrics) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	certs, err := NewCertReloader(cfg.CertFile, cfg.KeyFile, log, m)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, handler: handler, metrics: metrics, certs: certs, log: log}, nil
}

// Mux returns the webhook listener's routes.
func (s *Server) Mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(MutatePath, s.handler)
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	if s.metrics != nil && s.cfg.MetricsListen == "" {
		mux.Handle("/metrics", s.metrics)
	}
	return mux
}

// TLSConfig serves the reloaded certificate.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.certs.GetCertificate}
}

// Run listens on cfg.Listen (and cfg.MetricsListen) and serves until ctx
// ends.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Listen, err)
	}
	var mln net.Listener
	if s.metrics != nil && s.cfg.MetricsListen != "" {
		if mln, err = net.Listen("tcp", s.cfg.MetricsListen); err != nil {
			ln.Close()
			return fmt.Errorf("listening on %s: %w", s.cfg.MetricsListen, err)
		}
	}
	return s.Serve(ctx, ln, mln)
}

// Serve serves the webhook on ln (TLS is added here) and /metrics on mln
// when not nil, until ctx ends; then it drains for up to five seconds.
func (s *Server) Serve(ctx context.Context, ln, mln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.certs.Run(ctx, s.cfg.CertReload)
	errLog := stdlog.New(s.log, "", 0) // handshake errors, as structured logs
	srvs := []*http.Server{newHTTPServer(s.Mux(), s.TLSConfig(), errLog)}
	lns := []net.Listener{tls.NewListener(ln, srvs[0].TLSConfig)}
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.metrics)
		srvs, lns = append(srvs, newHTTPServer(mux, nil, errLog)), append(lns, mln)
		s.log.Info().Str("addr", mln.Addr().String()).Msg("bridge metrics listening")
	}
	s.log.Info().Str("addr", ln.Addr().String()).Msg("exec bridge listening")
	errs := make(chan error, len(srvs))
	for i, srv := range srvs {
		go func() { errs <- srv.Serve(lns[i]) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		err = fmt.Errorf("serving the exec bridge: %w", err)
	}
	shut, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	for _, srv := range srvs {
		if e := srv.Shutdown(shut); e != nil && !errors.Is(e, context.DeadlineExceeded) {
			err = errors.Join(err, fmt.Errorf("shutting down the exec bridge: %w", e))
		}
	}
	return err
}

func newHTTPServer(h http.Handler, tc *tls.Config, errLog *stdlog.Logger) *http.Server {
	return &http.Server{
		Handler: h, TLSConfig: tc, ErrorLog: errLog,
		// The apiserver gives up after the webhook's timeoutSeconds (at
		// most 30s); nothing legitimate is slower.
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 15 * time.Second, IdleTimeout: 90 * time.Second,
	}
}
