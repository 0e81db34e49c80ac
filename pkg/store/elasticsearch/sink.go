package elasticsearch

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
)

// AlertSink delivers alerts to the <prefix>-alerts-<period> indices as ECS
// alert documents (event.kind: alert, rule.name, event.severity, message).
// It has pkg/alert/delivery's Deliverer method set (Name, Deliver, Close) without
// importing it. Each alert is created under its ID, so a redelivered batch
// is idempotent: a 409 means "already delivered" and counts as success.
// A resolution (store.AlertResolved) updates the document of the alert it
// resolves, under the same ID, setting correlator.alert.status,
// resolved_at and resolution, or creates it whole where the alert is not
// there: a store on the same prefix reads these very documents, and a
// second document per ID would list the alert twice there.
type AlertSink struct {
	c       *conn
	n       names
	metrics *bulkMetrics
	log     zerolog.Logger
	// stop ends the alerts retention loop (nil when none runs); done is
	// closed when it has.
	stop context.CancelFunc
	done chan struct{}
}

// NewAlertSink connects and installs the alerts indices' template
// (idempotently), with an ILM delete policy of cfg.Retention where the
// cluster has ILM; where it has none, the sink drops alert indices older
// than that itself (see runRetention). reg may be nil.
func NewAlertSink(ctx context.Context, cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*AlertSink, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating Elasticsearch config: %w", err)
	}
	c, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	m := newBulkMetrics(reg, "correlator_es_alert_sink_bulk_items_total", "correlator_es_alert_sink_bulk_requests_total")
	n := namesFor(cfg.IndexPrefix, cfg.IndexPeriod)
	if err := c.install(ctx, n, cfg.Retention, true); err != nil {
		return nil, err
	}
	period, err := c.layout(ctx, n, cfg.IndexPeriod)
	if err != nil {
		return nil, err
	}
	a := &AlertSink{c: c, n: namesFor(cfg.IndexPrefix, period), metrics: m,
		log: log.With().Str("component", "alert-sink-elasticsearch").Logger()}
	if cfg.Retention > 0 && cfg.RetentionMode == RetentionLease && !c.hasILM(ctx) {
		a.runRetention(cfg, reg)
	}
	return a, nil
}

// runRetention drops alert indices older than cfg.Retention on a cluster
// without ILM, hourly, once per cluster under a lease of its own: the
// store's passes (if the store is Elasticsearch too) drop them as well.
func (a *AlertSink) runRetention(cfg Config, reg prometheus.Registerer) {
	st := &Store{c: a.c, cfg: cfg, n: a.n, log: a.log, now: time.Now, holder: holderName(cfg.Holder),
		metrics: newStoreMetrics(reg, sinkRetentionNames, false), kinds: []kind{kindAlerts}, leaseID: alertsLeaseDocID}
	st.metrics.bulk = a.metrics
	ctx, stop := context.WithCancel(context.Background())
	a.stop, a.done = stop, make(chan struct{})
	go func() {
		defer close(a.done)
		_ = st.RunRetention(ctx, cfg.Retention, time.Hour)
	}()
}

// Name names the sink in logs and metrics.
func (a *AlertSink) Name() string { return "elasticsearch" }

// Deliver indexes the batch and returns once every alert is stored; an
// error means the caller should retry the whole batch.
func (a *AlertSink) Deliver(ctx context.Context, alerts []store.Alert) error {
	ops := make([]op, 0, len(alerts))
	for i := range alerts {
		o, err := alertOp(a.n, &alerts[i])
		if err != nil {
			return fmt.Errorf("delivering alerts to elasticsearch: %w", err)
		}
		ops = append(ops, o)
	}
	if err := a.c.bulk(ctx, a.metrics, ops); err != nil {
		return fmt.Errorf("delivering %d alerts to elasticsearch: %w", len(alerts), err)
	}
	return nil
}

// Close stops the alerts retention loop, if one runs; the sink holds no
// buffer.
func (a *AlertSink) Close() error {
	if a.stop != nil {
		a.stop()
		<-a.done
	}
	return nil
}
