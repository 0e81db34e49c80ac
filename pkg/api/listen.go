package api

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// ServerConfig bounds the API's listener. Zero fields take
// DefaultServerConfig's values.
type ServerConfig struct {
	// Addr is the TCP address to listen on, such as ":8443".
	Addr string
	// ReadHeaderTimeout is how long a client has to send a request's
	// headers, including a new connection's first request.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included. The audit
	// webhook posts batches of up to 16 MiB, so keep it generous.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response; it must exceed ReadTimeout for the webhook.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request.
	IdleTimeout time.Duration
	// MaxConns caps the connections open at once; further clients wait in
	// the kernel's accept queue instead of taking file descriptors.
	MaxConns int
}

// DefaultServerConfig returns the API listener's defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      90 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxConns:          128,
	}
}

func (c ServerConfig) withDefaults() ServerConfig {
	d := DefaultServerConfig()
	// max(x, 0): a negative value also takes the default.
	c.ReadHeaderTimeout = cmp.Or(max(c.ReadHeaderTimeout, 0), d.ReadHeaderTimeout)
	c.ReadTimeout = cmp.Or(max(c.ReadTimeout, 0), d.ReadTimeout)
	c.WriteTimeout = cmp.Or(max(c.WriteTimeout, 0), d.WriteTimeout)
	c.IdleTimeout = cmp.Or(max(c.IdleTimeout, 0), d.IdleTimeout)
	c.MaxConns = cmp.Or(max(c.MaxConns, 0), d.MaxConns)
	return c
}

// Server serves the API with bounded timeouts and a cap on open
// connections.
type Server struct {
	cfg ServerConfig
	srv *http.Server
}

// NewServer returns a server for h; see ServerConfig for the bounds.
func NewServer(h http.Handler, cfg ServerConfig) *Server {
	cfg = cfg.withDefaults()
	return &Server{cfg: cfg, srv: &http.Server{
		Addr:              cfg.Addr,
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}}
}

// ListenAndServe listens on Addr and serves plain HTTP until Shutdown.
func (s *Server) ListenAndServe() error {
	ln, err := s.listen(":http")
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// ListenAndServeTLS listens on Addr and serves HTTPS until Shutdown.
func (s *Server) ListenAndServeTLS(certFile, keyFile string) error {
	ln, err := s.listen(":https")
	if err != nil {
		return err
	}
	return s.ServeTLS(ln, certFile, keyFile)
}

// Listen binds Addr, so a caller can report the port bound before serving.
func (s *Server) Listen() (net.Listener, error) { return s.listen(":http") }

// ServeTLS serves HTTPS on ln, at most MaxConns connections at once.
func (s *Server) ServeTLS(ln net.Listener, certFile, keyFile string) error {
	return s.srv.ServeTLS(newLimitListener(ln, s.cfg.MaxConns), certFile, keyFile)
}

// Serve serves plain HTTP on ln, at most MaxConns connections at once.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(newLimitListener(ln, s.cfg.MaxConns))
}

// Shutdown stops accepting, then waits for active requests to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.srv.Shutdown(ctx)
}

func (s *Server) listen(fallback string) (net.Listener, error) {
	addr := s.cfg.Addr
	if addr == "" {
		addr = fallback
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	return ln, nil
}

// limitListener accepts a connection only while fewer than cap are open,
// like golang.org/x/net/netutil.LimitListener: it takes a slot before
// calling Accept, so clients beyond the cap stay in the accept queue.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// open is how many accepted connections are still open.
func (l *limitListener) open() int { return len(l.sem) }

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
