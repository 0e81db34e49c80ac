package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/auditlog/auditjson"
)

// auditSourceFlags binds the audit-ingestion flags; `run` and `audit ship`
// reuse them.
func auditSourceFlags(fs *pflag.FlagSet, o *auditlog.SourcesConfig) {
	fs.StringArrayVar(&o.LogPaths, "audit-log", nil, "audit log file to follow (repeatable)")
	fs.StringVar(&o.CheckpointDir, "audit-checkpoint-dir", "/var/lib/correlator/audit", "where tail offsets are kept across restarts (empty: none)")
	fs.BoolVar(&o.Backlog, "audit-backlog", false, "on first start also read rotated files (.gz included), oldest first")
	fs.StringVar(&o.WebhookListen, "audit-webhook-listen", "", "address for the audit webhook receiver, e.g. :8443; without a token file or client CA only a loopback address")
	fs.StringVar(&o.TokenFile, "audit-webhook-token-file", "", "file of bearer tokens webhook senders may present, one per line, # comments (reloaded when it changes)")
	fs.StringVar(&o.TLSCert, "audit-webhook-tls-cert", "", "webhook server certificate (PEM)")
	fs.StringVar(&o.TLSKey, "audit-webhook-tls-key", "", "webhook server key (PEM)")
	fs.StringVar(&o.ClientCA, "audit-webhook-client-ca", "", "CA bundle client certificates must chain to (enables verification)")
	fs.StringVar(&o.FirehoseKeyFile, "audit-webhook-firehose-access-key-file", "", "file of access keys Amazon Data Firehose HTTP endpoint deliveries may carry (X-Amz-Firehose-Access-Key), one per line, # comments (reloaded when it changes); without it Firehose deliveries are refused")
	fs.Int64Var(&o.MaxBody, "audit-webhook-max-body-bytes", auditlog.DefaultMaxBodyBytes, "largest webhook request body accepted")
}

func newAuditWatchCmd(g *globalOptions) *cobra.Command {
	var o auditlog.SourcesConfig
	var maxRecords int
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow audit log files and/or receive the audit webhook; print sessions as they change",
		Long: `Follows audit log files and/or receives the apiserver's audit webhook and
prints each streaming session (exec, attach, port-forward) as a JSON line
whenever its record changes.

` + leavesNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			metrics, err := auditlog.NewMetrics(prometheus.NewRegistry())
			if err != nil {
				return err
			}
			srcs, err := o.Sources(nil, g.logger(), metrics)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return auditjson.Watch(ctx, srcs, auditlog.NewMerger(auditlog.MergerConfig{MaxRecords: maxRecords}), cmd.OutOrStdout())
		},
	}
	auditSourceFlags(cmd.Flags(), &o)
	cmd.Flags().IntVar(&maxRecords, "max-records", auditlog.DefaultMaxRecords, "sessions held in memory for merging")
	return cmd
}
