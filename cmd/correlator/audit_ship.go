package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/agent"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// newAuditShipCmd is the control-plane role: follow the apiserver's audit
// log (or receive its webhook) and index the streaming exec records into
// Elasticsearch, where every node's agent looks them up.
func newAuditShipCmd(g *globalOptions) *cobra.Command {
	var o auditSourceOptions
	var es esOptions
	cmd := &cobra.Command{
		Use:   "ship",
		Short: "Index the streaming (exec, attach, port-forward) audit records into Elasticsearch",
		Long: `Follows the apiserver's audit log (or receives its webhook) and indexes the
streaming exec, attach and port-forward records into Elasticsearch, where
every node's agent looks them up: the control plane's part.

` + leavesNothing,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger().With().Str("component", "audit-ship").Logger()
			if len(o.logPaths) == 0 && o.webhookListen == "" {
				return errors.New("validating audit sources: give --audit-log or --audit-webhook-listen")
			}
			cfg, err := es.config()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			reg := prometheus.NewRegistry()
			st, err := elasticsearch.Open(ctx, cfg, log, reg)
			if err != nil {
				return err
			}
			defer st.Close()
			metrics, err := auditlog.NewMetrics(reg)
			if err != nil {
				return err
			}
			srcs, err := o.sources(log, metrics)
			if err != nil {
				return err
			}
			return ship(ctx, srcs, st.WriteAuditRecords, log)
		},
	}
	o.addFlags(cmd.Flags())
	es.addFlags(cmd.Flags())
	return cmd
}

// ship runs the sources and writes every streaming stage they deliver. A
// failed write is returned to the source, which keeps the events and
// retries (tail) or answers the sender with an error (webhook).
func ship(ctx context.Context, srcs []auditlog.Source, write func(context.Context, []store.AuditRecord) error, log zerolog.Logger) error {
	sink := func(ctx context.Context, evs []auditlog.Event) error {
		recs := make([]store.AuditRecord, 0, len(evs))
		for i := range evs {
			r, err := agent.AuditRecord(&evs[i])
			if err != nil {
				log.Warn().Err(err).Msg("skipping audit stage")
				continue
			}
			recs = append(recs, r)
		}
		if len(recs) == 0 {
			return nil
		}
		return write(ctx, recs)
	}
	return runSources(ctx, srcs, sink)
}
