package main

import "github.com/spf13/cobra"

// newAuditCmd is replaced by the audit-ingestion work (issue [2 of 5]).
func newAuditCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{Use: "audit", Short: "Audit log tools", Hidden: true}
}
