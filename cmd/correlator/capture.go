package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/capture"
)

func newCaptureCmd(g *globalOptions) *cobra.Command {
	cf := newCaptureFlags(false)
	var filter capture.Filter
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
reads probes pinned there; one that was killed is looked up and its
pins taken over at once.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := capture.CheckPins(cf.pin, cmd.Flags().Changed("pin-path"), cf.cfg.PinPath); err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			return capture.Stream(ctx, cf.config(), filter, os.Stdout, g.logger())
		},
	}
	f := cmd.Flags()
	cf.add(f)
	f.BoolVar(&filter.ContainersOnly, "containers-only", false, "print only processes that run in a container")
	f.BoolVar(&filter.WithIDOnly, "with-id-only", false, "print only processes that carry or claim an ID")
	return cmd
}
