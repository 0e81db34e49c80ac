package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/capture"
)

// newUninstallCmd removes what the agent leaves in the kernel on purpose:
// its pinned probes keep running between agents, so deleting the agent
// alone does not stop them. The Helm chart runs it in a pre-delete hook.
func newUninstallCmd(g *globalOptions) *cobra.Command {
	pinPath := capture.DefaultPinPath
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Detach correlator's pinned eBPF probes from this node and remove their pins",
		Long: `uninstall detaches every probe correlator pinned under --pin-path (every
build: an interrupted upgrade may leave two) and removes the pinned maps,
so the node keeps nothing of correlator in the kernel. The probes of an
agent still running stay attached until it exits. Live sessions lose their
lineage: an agent started later finds them through procfs only, flagged
procfs_root. The Helm chart runs it in a pre-delete hook on every node.

` + kernelHelpPrefix + `none of correlator's pins under
--pin-path (only an agent still running keeps its probes, until it exits);
it loads nothing itself.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := capture.Preflight(); err != nil {
				return err
			}
			r, err := capture.Remove(pinPath)
			log := g.logger().With().Str("component", "uninstall").Logger()
			log.Info().Str("pin_path", pinPath).
				Int("builds", r.Builds).Int("links", r.Links).Msg("removed pinned probes")
			fmt.Fprintf(cmd.OutOrStdout(), "detached %d probes of %d builds; removed %s\n", r.Links, r.Builds, pinPath)
			return err
		},
	}
	cmd.Flags().StringVar(&pinPath, "pin-path", pinPath, "bpffs directory the agent pins its probes and lineage in")
	return cmd
}
