// Package elasticsearch is the cluster-scale store.Backend: sessions,
// processes, audit records and alerts as ECS documents in Elasticsearch 8,
// written with go-elasticsearch's BulkIndexer and read with the same
// filters, ordering and keyset cursors as the SQLite store. It also looks
// audit records up (ours and Elastic Agent's kubernetes.audit_logs) and
// delivers alerts to an alerts data stream.
//
// Unlike SQLite, a Batch is not atomic here: bulk items succeed or fail one
// by one. Write returns only after every item is acknowledged, retrying
// items rejected for load; items refused for good are named in its error
// while the rest stay stored. Writes become searchable after the index
// refresh (about a second) unless Config.Refresh is "wait_for".
package elasticsearch

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
)

var _ store.Backend = (*Store)(nil)

// Store is the Elasticsearch store. Its methods are safe for concurrent
// use.
type Store struct {
	c       *conn
	cfg     Config
	n       names
	log     zerolog.Logger
	metrics *storeMetrics
	now     func() time.Time
	// holder names this store in the retention lease.
	holder string
	// kinds are those its retention passes drop (nil: all), under the
	// lease document leaseID.
	kinds   []kind
	leaseID string
}

// storeMetrics are the store's bulk counters and its retention passes.
type storeMetrics struct {
	bulk    *bulkMetrics
	passes  *prometheus.CounterVec
	dropped prometheus.Counter
}

// Retention metric names: the store's, and an alert sink's (whose
// passes drop alert indices only).
var (
	storeRetentionNames = [2]string{"correlator_es_retention_passes_total", "correlator_es_retention_indices_dropped_total"}
	sinkRetentionNames  = [2]string{"correlator_es_alert_sink_retention_passes_total", "correlator_es_alert_sink_retention_indices_dropped_total"}
)

// newStoreMetrics registers the retention counters named names on reg
// (may be nil), and with bulk the store's bulk counters.
func newStoreMetrics(reg prometheus.Registerer, names [2]string, bulk bool) *storeMetrics {
	f := promauto.With(reg)
	m := &storeMetrics{
		passes: f.NewCounterVec(prometheus.CounterOpts{
			Name: names[0],
			Help: "Elasticsearch retention passes this agent was due, by result: ran (it held the lease), skipped (another agent held it, or a pass ended less than an interval ago), error.",
		}, []string{"result"}),
		dropped: f.NewCounter(prometheus.CounterOpts{
			Name: names[1],
			Help: "Elasticsearch indices this agent's retention passes deleted whole.",
		}),
	}
	if bulk {
		m.bulk = newBulkMetrics(reg, "correlator_es_store_bulk_items_total", "correlator_es_store_bulk_requests_total")
	}
	for _, r := range []string{"ran", "skipped", "error"} {
		m.passes.WithLabelValues(r)
	}
	return m
}

// Open connects, checks the cluster answers, and installs the index
// templates, indices, ILM policy and alerts data stream (idempotently).
// reg may be nil.
func Open(ctx context.Context, cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating Elasticsearch config: %w", err)
	}
	c, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{c: c, cfg: cfg, metrics: newStoreMetrics(reg, storeRetentionNames, true), now: time.Now, holder: holderName(cfg.Holder),
		leaseID: leaseDocID,
		log:     log.With().Str("component", "store-elasticsearch").Logger()}
	version, err := c.version(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to Elasticsearch: %w", err)
	}
	n := namesFor(cfg.IndexPrefix, cfg.IndexPeriod)
	if err := c.install(ctx, n, 0, false); err != nil {
		return nil, err
	}
	period, err := c.layout(ctx, n, cfg.IndexPeriod)
	if err != nil {
		return nil, err
	}
	if period != cfg.IndexPeriod {
		s.log.Warn().Dur("configured", cfg.IndexPeriod).Dur("recorded", period).
			Msg("the cluster's index period differs from this agent's: using the cluster's, which every agent shares")
	}
	s.n = namesFor(cfg.IndexPrefix, period)
	s.log.Debug().Str("version", version).Str("prefix", cfg.IndexPrefix).Dur("period", period).Msg("elasticsearch store open")
	return s, nil
}

// Close releases nothing the client holds open; it exists for store.Backend.
func (s *Store) Close() error { return nil }

// Write indexes a batch: sessions, processes and audit records replace the
// stored document with the same key; alerts are created once by ID, and a
// resolution updates its alert's document (resolutionUpdate). Not atomic:
// see the package comment.
func (s *Store) Write(ctx context.Context, b store.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	ops, err := s.ops(b)
	if err != nil {
		return err
	}
	return s.c.bulk(ctx, s.metrics.bulk, ops)
}

// WriteAuditRecords indexes streaming exec audit records into the audit
// index (for `correlator audit ship`); a record with a stored (auditID,
// stage, RequestKey) replaces it, and one of a different request with the
// same audit ID is kept beside it.
func (s *Store) WriteAuditRecords(ctx context.Context, recs []store.AuditRecord) error {
	return s.Write(ctx, store.Batch{AuditRecords: recs})
}

// ops checks and encodes the whole batch before anything is sent, so a
// malformed row refuses the batch as SQLite does. Rows with one key keep
// only the last, as one transaction would leave them.
func (s *Store) ops(b store.Batch) ([]op, error) {
	now := s.now()
	var ops []op
	seen := map[string]int{}
	add := func(o op) {
		if o.action == "update" {
			// A resolution applies in order after what came before it
			// (its alert's create), and its repeats are no-ops.
			ops = append(ops, o)
			return
		}
		k := o.index + "\x00" + o.id
		if i, ok := seen[k]; ok && o.action == "index" {
			ops[i] = o
			return
		}
		if _, ok := seen[k]; ok {
			return // a second create of one alert ID is a no-op
		}
		seen[k] = len(ops)
		ops = append(ops, o)
	}
	for i := range b.Sessions {
		ss := &b.Sessions[i]
		if ss.AuditID == "" {
			return nil, fmt.Errorf("checking session: empty audit ID")
		}
		body, err := json.Marshal(sessionToDoc(ss, now))
		if err != nil {
			return nil, fmt.Errorf("encoding session %s: %w", ss.AuditID, err)
		}
		add(op{index: s.n.index(kindSessions, ss.RequestReceivedTimestamp), action: "index", id: ss.AuditID, what: "session " + ss.AuditID, body: body})
	}
	// An exit alone is indexed whole, like any process: a document is
	// replaced whole, and a partial update would fail where it is missing.
	for p := range b.AllProcesses() {
		if p.ProcessID == "" {
			return nil, fmt.Errorf("checking process: empty process ID")
		}
		body, err := json.Marshal(processToDoc(p))
		if err != nil {
			return nil, fmt.Errorf("encoding process %s: %w", p.ProcessID, err)
		}
		add(op{index: s.n.index(kindProcesses, p.Start), action: "index", id: p.ProcessID, what: "process " + p.ProcessID, body: body})
	}
	for i := range b.AuditRecords {
		r := &b.AuditRecords[i]
		if r.AuditID == "" || r.Stage == "" {
			return nil, fmt.Errorf("checking audit record: empty audit ID or stage")
		}
		body, err := json.Marshal(auditToDoc(r))
		if err != nil {
			return nil, fmt.Errorf("encoding audit record %s/%s: %w", r.AuditID, r.Stage, err)
		}
		// The request key keeps a different request that reuses the audit
		// ID beside the first, as SQLite's primary key does.
		id := r.AuditID + "/" + r.Stage + "/" + r.RequestKey()
		add(op{index: s.n.index(kindAudit, r.StageTimestamp), action: "index", id: id, what: "audit record " + id, body: body})
	}
	for i := range b.Alerts {
		aop, err := alertOp(s.n, &b.Alerts[i])
		if err != nil {
			return nil, err
		}
		add(aop)
	}
	return ops, nil
}

func alertOp(n names, a *store.Alert) (op, error) {
	if a.ID == "" {
		return op{}, fmt.Errorf("checking alert: empty ID")
	}
	body, err := json.Marshal(alertToDoc(a))
	if err != nil {
		return op{}, fmt.Errorf("encoding alert %s: %w", a.ID, err)
	}
	o := op{index: n.index(kindAlerts, a.Time), action: "create", id: a.ID, what: "alert " + a.ID, body: body}
	if a.Status == store.AlertResolved {
		// The resolution has the alert's time, so its index.
		if o.body, err = json.Marshal(resolutionUpdate(a)); err != nil {
			return op{}, fmt.Errorf("encoding resolution of alert %s: %w", a.ID, err)
		}
		o.action, o.what = "update", "resolution of alert "+a.ID
	}
	return o, nil
}
