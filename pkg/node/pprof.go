package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/api"
)

// validatePprof accepts an empty address (off, the default) or a loopback
// one: profiles name the agent's internals and cost CPU while taken.
func validatePprof(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("validating --pprof-listen %q: %w", addr, err)
	}
	if !api.IsLoopback(addr) {
		return fmt.Errorf("validating --pprof-listen %q: must be a loopback address", addr)
	}
	return nil
}

// startPprof serves net/http/pprof on addr until the returned stop runs.
func startPprof(addr string, log zerolog.Logger) (stop func() error, err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on --pprof-listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("pprof server stopped")
		}
	}()
	log.Info().Str("component", "pprof").Str("listen", ln.Addr().String()).Msg("serving pprof")
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}, nil
}
