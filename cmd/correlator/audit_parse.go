package main

import (
	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/auditlog/auditjson"
)

func newAuditParseCmd(g *globalOptions) *cobra.Command {
	var cfg auditjson.ParseConfig
	cmd := &cobra.Command{
		Use:   "parse [FILE|-]...",
		Short: "Print the exec, attach and port-forward sessions in audit logs as JSON lines",
		Long: `Reads audit logs in any framing kube-apiserver and the clouds produce (JSON lines,
webhook EventList bodies, arrays, AKS and CloudWatch envelopes, CRI and OpenShift prefixes, the
legacy text format, gzip) and prints one JSON line per streaming session, stages merged.
A summary goes to stderr. Bad records are counted, never fatal.

` + leavesNothing,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"-"}
			}
			cfg.In, cfg.Out, cfg.ErrOut = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			return auditjson.Parse(cfg, args, g.logger())
		},
	}
	cmd.Flags().IntVar(&cfg.MaxRecords, "max-records", auditlog.DefaultMaxRecords, "sessions held in memory for merging; older ones are printed and dropped")
	cmd.Flags().IntVar(&cfg.MaxLineBytes, "max-line-bytes", auditlog.DefaultMaxLineBytes, "longest line accepted")
	return cmd
}
