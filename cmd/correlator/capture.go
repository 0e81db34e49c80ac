package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/capture"
)

func newCaptureCmd(g *globalOptions) *cobra.Command {
	cf := newCaptureFlags()
	var (
		containerOnly bool
		withIDOnly    bool
	)
	cmd := &cobra.Command{
		Use:   "capture",
		Short: "Stream process exec/exit events with their exec-session IDs as JSON lines",
		Long: `capture loads correlator's eBPF probes and prints one JSON line per process
exec and exit: who the process is (processID, pid, argv, container), which
exec session it belongs to (auditID, inherited through fork in the kernel),
and any evidence of tampering (flags). It needs root and a BTF kernel.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			return runCapture(ctx, g, cf.config(), func(ev capture.Event) bool {
				if containerOnly && ev.ContainerID == "" {
					return false
				}
				return !withIDOnly || ev.AuditID != "" || ev.ClaimedAuditID != "" || len(ev.Keys) > 0
			})
		},
	}
	f := cmd.Flags()
	cf.add(f)
	f.BoolVar(&containerOnly, "containers-only", false, "print only processes that run in a container")
	f.BoolVar(&withIDOnly, "with-id-only", false, "print only processes that carry or claim an ID")
	return cmd
}

func runCapture(ctx context.Context, g *globalOptions, cfg capture.Config, keep func(capture.Event) bool) error {
	log := g.logger()
	p, err := capture.Load(cfg, log)
	if err != nil {
		return err
	}
	defer p.Close()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	// Flush when the ring is drained, and at least every flush interval:
	// on a busy host the ring is never empty, and a filtered line must
	// not sit in the buffer waiting for it.
	lastFlush := time.Now()
	emit := func(ev capture.Event) {
		if keep(ev) {
			_ = enc.Encode(ev)
		}
		if out.Buffered() > 0 && (p.Backlog() == 0 || time.Since(lastFlush) >= cfg.FlushInterval) {
			out.Flush()
			lastFlush = time.Now()
		}
	}
	if err := p.Attach(); err != nil {
		return err
	}
	boot, err := p.Bootstrap()
	if err != nil {
		log.Warn().Err(err).Str("component", "capture").Msg("bootstrapping from procfs")
	}
	for _, ev := range boot {
		emit(ev)
	}
	out.Flush()
	log.Info().Str("component", "capture").Bool("resumed", p.Resumed()).Int("bootstrapped", len(boot)).Msg("capturing")
	return p.Run(ctx, emit, nil)
}
