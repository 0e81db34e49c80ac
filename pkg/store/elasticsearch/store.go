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
	metrics *bulkMetrics
	now     func() time.Time
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
	m := newBulkMetrics(reg, "correlator_es_store_bulk_items_total", "correlator_es_store_bulk_requests_total")
	s := &Store{c: c, cfg: cfg, n: namesFor(cfg.IndexPrefix), metrics: m, now: time.Now,
		log: log.With().Str("component", "store-elasticsearch").Logger()}
	var info struct {
		Version struct {
			Number string `json:"number"`
		} `json:"version"`
	}
	if err := c.do(ctx, "GET", "/", nil, nil, &info); err != nil {
		return nil, fmt.Errorf("connecting to Elasticsearch: %w", err)
	}
	if err := c.install(ctx, s.n, cfg.Retention, false); err != nil {
		return nil, err
	}
	s.log.Debug().Str("version", info.Version.Number).Str("prefix", cfg.IndexPrefix).Msg("elasticsearch store open")
	return s, nil
}

// Close releases nothing the client holds open; it exists for store.Backend.
func (s *Store) Close() error { return nil }

// Write indexes a batch: sessions, processes and audit records replace the
// stored document with the same key; alerts are created once by ID. Not
// atomic: see the package comment.
func (s *Store) Write(ctx context.Context, b store.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	ops, err := s.ops(b)
	if err != nil {
		return err
	}
	return s.c.bulk(ctx, s.metrics, ops)
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
		add(op{index: s.n.sessions, action: "index", id: ss.AuditID, what: "session " + ss.AuditID, body: body})
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
		add(op{index: s.n.processes, action: "index", id: p.ProcessID, what: "process " + p.ProcessID, body: body})
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
		add(op{index: s.n.audit, action: "index", id: id, what: "audit record " + id, body: body})
	}
	for i := range b.Alerts {
		aop, err := alertOp(s.n.alerts, &b.Alerts[i])
		if err != nil {
			return nil, err
		}
		add(aop)
	}
	return ops, nil
}

func alertOp(index string, a *store.Alert) (op, error) {
	if a.ID == "" {
		return op{}, fmt.Errorf("checking alert: empty ID")
	}
	body, err := json.Marshal(alertToDoc(a))
	if err != nil {
		return op{}, fmt.Errorf("encoding alert %s: %w", a.ID, err)
	}
	return op{index: index, action: "create", id: a.ID, what: "alert " + a.ID, body: body}, nil
}
