// Package ship is the control-plane role: follow the apiserver's audit
// log (or receive its webhook) and index the streaming exec records into
// Elasticsearch, where every node's agent looks them up.
package ship

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// Config is where the records come from and go to.
type Config struct {
	Sources auditlog.SourcesConfig
	ES      elasticsearch.Connection
	// Retention, when positive, makes this role take its turn at the
	// cluster's retention (under the same lease as agents): the chart's
	// elasticsearch.retention.by=shipper, with the agents' --es-retention off.
	Retention time.Duration
}

// Run opens the index and ships the sources' records until ctx ends.
func Run(ctx context.Context, cfg Config, log zerolog.Logger) error {
	if !cfg.Sources.Configured() {
		return errors.New("validating audit sources: give --audit-log or --audit-webhook-listen")
	}
	esCfg, err := cfg.ES.Resolve()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	st, err := elasticsearch.Open(ctx, esCfg, log, reg)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.Retention > 0 {
		go func() {
			if err := st.RunRetention(ctx, cfg.Retention, time.Hour); err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("retention stopped")
			}
		}()
	}
	metrics, err := auditlog.NewMetrics(reg)
	if err != nil {
		return err
	}
	srcs, err := cfg.Sources.Sources(nil, log, metrics)
	if err != nil {
		return err
	}
	return Ship(ctx, srcs, st.WriteAuditRecords, log)
}

// Ship runs the sources and writes every streaming stage they deliver. A
// failed write is returned to the source, which keeps the events and
// retries (tail) or answers the sender with an error (webhook).
func Ship(ctx context.Context, srcs []auditlog.Source, write func(context.Context, []store.AuditRecord) error, log zerolog.Logger) error {
	sink := func(ctx context.Context, evs []auditlog.Event) error {
		recs := make([]store.AuditRecord, 0, len(evs))
		for i := range evs {
			r, err := store.AuditRecordOf(&evs[i])
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
	return auditlog.RunSources(ctx, srcs, sink)
}
