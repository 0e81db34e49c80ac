package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/execid/correlator/pkg/capture"
)

// Run runs every part until ctx ends or the API server fails, then shuts
// down in order and releases what New built. Nothing here fails to start:
// every goroutine is in one group, and a part that ends before shutdown
// makes the agent unready and is logged. Call it once.
func (n *Node) Run(ctx context.Context) (err error) {
	defer func() { err = errors.Join(err, n.cl.run()) }()
	log, cfg := n.log, &n.cfg
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	var g errgroup.Group
	goRun := func(name string, fn func(context.Context) error) {
		g.Go(func() error {
			err := fn(runCtx)
			if runCtx.Err() == nil {
				n.rd.partStopped(name, err)
				log.Error().Err(err).Str("component", name).Msg("stopped before shutdown")
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("running %s: %w", name, err)
			}
			return nil
		})
	}
	goRun("agent", n.ag.Run)
	// Without a CRI socket the metadata refresher has nothing to run.
	g.Go(func() error { n.res.Run(runCtx); return nil })
	goRun("retention", func(ctx context.Context) error {
		return n.st.RunRetention(ctx, cfg.Retention, RetentionInterval(cfg.Retention))
	})
	if n.disp != nil {
		goRun("alerts", n.disp.Run)
	}
	if n.probe != nil {
		n.startCapture(runCtx, goRun)
	}
	for _, s := range n.srcs {
		goRun("auditlog", func(ctx context.Context) error { return s.Run(ctx, n.ag.AuditSink()) })
	}
	srvErr := make(chan error, 1)
	go func() {
		if cfg.TLSCert != "" {
			srvErr <- n.srv.ServeTLS(n.ln, cfg.TLSCert, cfg.TLSKey)
		} else {
			srvErr <- n.srv.Serve(n.ln)
		}
	}()
	log.Info().Str("component", "run").Str("listen", n.ln.Addr().String()).Bool("capture", n.probe != nil).Msg("correlator running")

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-srvErr:
		log.Error().Err(serveErr).Msg("API server stopped")
	}
	// Shut down in order: stop intake, drain the joiner; the cleanups then
	// flush the store and close the spools.
	shCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.srv.Shutdown(shCtx); err != nil {
		serveErr = errors.Join(serveErr, fmt.Errorf("shutting down the API server: %w", err))
	}
	stop()
	partsErr := g.Wait()
	log.Info().Str("component", "run").Msg("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, partsErr)
}

// startCapture feeds the joiner the processes procfs shows, then the
// kernel's events.
func (n *Node) startCapture(runCtx context.Context, goRun func(string, func(context.Context) error)) {
	boot, err := n.probe.Bootstrap()
	if err != nil {
		n.log.Warn().Err(err).Msg("bootstrapping lineage from procfs")
	}
	// Queued as bursts: a node's thousands of processes take a queue place
	// per 256, not one each.
	if err := n.ag.ProcessBurst(runCtx, boot); err != nil {
		n.log.Warn().Err(err).Msg("queueing the procfs processes")
	}
	goRun("capture", func(ctx context.Context) error {
		return n.probe.RunBatches(ctx, func(evs []capture.Event) {
			for _, ev := range evs {
				n.col.Observe(ev)
			}
			n.ag.ProcessBurst(ctx, evs)
		}, n.col.BadFrame)
	})
}
