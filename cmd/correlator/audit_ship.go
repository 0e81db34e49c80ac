package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/auditlog/ship"
)

// newAuditShipCmd is the control-plane role (pkg/auditlog/ship).
func newAuditShipCmd(g *globalOptions) *cobra.Command {
	var cfg ship.Config
	cmd := &cobra.Command{
		Use:   "ship",
		Short: "Index the streaming (exec, attach, port-forward) audit records into Elasticsearch",
		Long: `Follows the apiserver's audit log (or receives its webhook) and indexes the
streaming exec, attach and port-forward records into Elasticsearch, where
every node's agent looks them up: the control plane's part.

` + leavesNothing,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return ship.Run(ctx, cfg, g.logger().With().Str("component", "audit-ship").Logger())
		},
	}
	auditSourceFlags(cmd.Flags(), &cfg.Sources)
	esFlags(cmd.Flags(), &cfg.ES)
	cmd.Flags().DurationVar(&cfg.Retention, "retention", 0,
		"take a turn at the cluster's retention, dropping indices older than this (0: the agents do it)")
	return cmd
}
