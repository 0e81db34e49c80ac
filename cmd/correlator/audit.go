package main

import "github.com/spf13/cobra"

// newAuditCmd groups the audit-log tools (issue [2 of 5]).
func newAuditCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read kube-apiserver audit logs",
	}
	cmd.AddCommand(newAuditParseCmd(g), newAuditWatchCmd(g), newAuditShipCmd(g))
	return cmd
}
