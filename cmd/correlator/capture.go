package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/capture"
)

func newCaptureCmd(g *globalOptions) *cobra.Command {
	cf := newCaptureFlags(false)
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
and any evidence of tampering (flags). It needs root and a BTF kernel.

` + kernelHelpPrefix + `nothing once it exits. Its probes,
ring and lineage are its own and unpinned: they are detached and freed when
it exits (Ctrl-C, SIGTERM, even SIGKILL), and an agent running beside it,
pinned or not, is left alone. With --pin they are pinned under --pin-path
as the agent pins them (it says so in its log): they keep running after it
exits, the next agent or capture --pin adopts them, and
` + "`correlator uninstall`" + ` removes them. --pin is refused while an agent
reads probes pinned there.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.checkCapturePins(cmd.Flags().Changed("pin-path")); err != nil {
				return err
			}
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

// checkCapturePins refuses what would make capture touch pins it was not
// asked to, or another process's: a --pin-path without --pin, and --pin
// where a live agent reads (the same build would share its ring; another
// would take its probes over and remove its pins).
func (c *captureFlags) checkCapturePins(pinPathSet bool) error {
	switch {
	case !c.pin && pinPathSet:
		return errors.New("validating --pin-path: capture pins only with --pin (without it nothing is pinned and nothing stays in the kernel)")
	case !c.pin:
		return nil
	}
	if r, ok := capture.LiveReader(c.cfg.PinPath); ok {
		return fmt.Errorf("validating --pin: process %d (an agent?) is reading the probes pinned in %s (heartbeat %s ago); "+
			"capture --pin there would share or take over its probes: run capture without --pin (its own probes, beside the agent's) or give another --pin-path",
			r.PID, r.Dir, r.Since.Round(time.Millisecond))
	}
	return nil
}

// logKernelState says, once the probes are attached, what they leave in
// the kernel when this process exits.
func logKernelState(log zerolog.Logger, cfg capture.Config) {
	ev := log.Info().Str("component", "capture")
	if cfg.PinPath == "" {
		ev.Msg("probes not pinned: they are detached when this process exits")
		return
	}
	ev.Str("pin_path", cfg.PinPath).Msg("probes pinned: they keep running in the kernel after this process exits, until `correlator uninstall --pin-path " + cfg.PinPath + "`")
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
	logKernelState(log, cfg)
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
