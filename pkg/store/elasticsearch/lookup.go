package elasticsearch

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/execid/correlator/pkg/auditlog"
)

// ElasticAgentAuditPattern is where Elastic Agent's Kubernetes integration
// writes apiserver audit logs: the event under kubernetes.audit, with its
// annotation keys dedotted (authorization_k8s_io/decision).
const ElasticAgentAuditPattern = "logs-kubernetes.audit_logs-*"

// LookupConfig tunes a Lookup. Zero fields take defaults.
type LookupConfig struct {
	// Pattern is the Elastic Agent index pattern; "-" searches only ours.
	Pattern string
	// CacheSize bounds the cached auditIDs (10000).
	CacheSize int
	// TTL keeps a complete record (5m); NegativeTTL keeps "not found" and
	// records still missing their last stage (10s).
	TTL, NegativeTTL time.Duration
	// QPS and Burst rate-limit the searches (20, 40).
	QPS   float64
	Burst int
}

// withDefaults fills zero and negative fields.
func (c LookupConfig) withDefaults() LookupConfig {
	c.Pattern = cmp.Or(c.Pattern, ElasticAgentAuditPattern)
	c.CacheSize = cmp.Or(max(c.CacheSize, 0), 10000)
	c.TTL = cmp.Or(max(c.TTL, 0), 5*time.Minute)
	c.NegativeTTL = cmp.Or(max(c.NegativeTTL, 0), 10*time.Second)
	c.QPS = cmp.Or(max(c.QPS, 0), 20)
	c.Burst = cmp.Or(max(c.Burst, 0), 40)
	return c
}

// Lookup finds the exec audit records of an auditID in Elasticsearch:
// in this store's audit index and in Elastic Agent's audit log data
// streams. It implements auditlog.Lookup and is safe for concurrent use.
type Lookup struct {
	c       *conn
	cfg     LookupConfig
	indices string
	cache   *lru.Cache[string, cached]
	limit   *rate.Limiter
	now     func() time.Time
	log     zerolog.Logger

	results *prometheus.CounterVec
	skipped prometheus.Counter
	waited  prometheus.Counter
}

var _ auditlog.Lookup = (*Lookup)(nil)

type cached struct {
	recs    []auditlog.ExecRecord
	expires time.Time
}

// NewLookup connects with cfg (its IndexPrefix names our audit index) and
// registers its metrics on reg (may be nil; registering twice on one
// registry panics).
func NewLookup(cfg Config, lc LookupConfig, log zerolog.Logger, reg prometheus.Registerer) (*Lookup, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating Elasticsearch config: %w", err)
	}
	lc = lc.withDefaults()
	c, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	cache, err := lru.New[string, cached](lc.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("creating lookup cache: %w", err)
	}
	indices := namesFor(cfg.IndexPrefix, 0).audit
	if lc.Pattern != "-" {
		indices += "," + lc.Pattern
	}
	f := promauto.With(reg)
	l := &Lookup{
		c: c, cfg: lc, indices: indices, cache: cache, now: time.Now,
		limit: rate.NewLimiter(rate.Limit(lc.QPS), lc.Burst),
		log:   log.With().Str("component", "es-audit-lookup").Logger(),
		results: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_es_audit_lookups_total",
			Help: "Audit lookups in Elasticsearch, by result (found, not_found, cached_found, cached_not_found, error).",
		}, []string{"result"}),
		skipped: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_es_audit_lookup_documents_skipped_total",
			Help: "Documents an audit lookup found but could not read as audit events.",
		}),
		waited: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_es_audit_lookup_rate_limited_total",
			Help: "Audit lookups that waited for the rate limiter.",
		}),
	}
	for _, r := range []string{"found", "not_found", "cached_found", "cached_not_found", "error"} {
		l.results.WithLabelValues(r) // exported at zero, so a dashboard sees them
	}
	return l, nil
}

// LookupExec returns the streaming-request records of auditID (none if it
// is not there, or not a streaming request). Answers are cached: complete
// records for TTL, anything else for NegativeTTL.
func (l *Lookup) LookupExec(ctx context.Context, auditID string) ([]auditlog.ExecRecord, error) {
	if auditID == "" {
		return nil, nil
	}
	if e, ok := l.cache.Get(auditID); ok && l.now().Before(e.expires) {
		if len(e.recs) == 0 {
			l.results.WithLabelValues("cached_not_found").Inc()
		} else {
			l.results.WithLabelValues("cached_found").Inc()
		}
		return cloneRecords(e.recs), nil
	}
	if !l.limit.Allow() {
		l.waited.Inc()
		if err := l.limit.Wait(ctx); err != nil {
			l.results.WithLabelValues("error").Inc()
			return nil, fmt.Errorf("looking up audit ID %s: waiting for the rate limit: %w", auditID, err)
		}
	}
	recs, err := l.query(ctx, auditID)
	if err != nil {
		l.results.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("looking up audit ID %s: %w", auditID, err)
	}
	ttl := l.cfg.NegativeTTL
	if len(recs) > 0 {
		l.results.WithLabelValues("found").Inc()
		ttl = l.cfg.TTL
		for i := range recs {
			if !recs[i].Complete() {
				ttl = l.cfg.NegativeTTL
			}
		}
	} else {
		l.results.WithLabelValues("not_found").Inc()
	}
	l.cache.Add(auditID, cached{recs: recs, expires: l.now().Add(ttl)})
	return cloneRecords(recs), nil
}

func cloneRecords(recs []auditlog.ExecRecord) []auditlog.ExecRecord {
	if recs == nil {
		return nil
	}
	out := make([]auditlog.ExecRecord, len(recs))
	for i := range recs {
		out[i] = recs[i].Clone()
	}
	return out
}

func (l *Lookup) query(ctx context.Context, auditID string) ([]auditlog.ExecRecord, error) {
	body := map[string]any{
		"size": 100,
		"query": map[string]any{"bool": map[string]any{
			"should": []any{
				map[string]any{"term": map[string]any{"correlator.audit_id": auditID}},
				map[string]any{"term": map[string]any{"kubernetes.audit.auditID": auditID}},
			},
			"minimum_should_match": 1,
		}},
	}
	var res struct {
		Hits struct {
			Hits []struct {
				Source json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	q := url.Values{"ignore_unavailable": {"true"}, "allow_no_indices": {"true"}}
	if err := l.c.do(ctx, "POST", "/"+l.indices+"/_search", q, body, &res); err != nil {
		return nil, err
	}
	sources := make([][]byte, len(res.Hits.Hits))
	for i, h := range res.Hits.Hits {
		sources[i] = h.Source
	}
	recs, skipped := execRecordsFromSources(auditID, sources)
	if skipped > 0 {
		l.skipped.Add(float64(skipped))
		l.log.Debug().Str("auditID", auditID).Int("skipped", skipped).Msg("unreadable audit documents")
	}
	return recs, nil
}

// execRecordsFromSources merges the audit events held by search hits'
// sources (ours: correlator.audit_event, a raw event; Elastic Agent's:
// kubernetes.audit, an event object) into the records of auditID. It
// returns how many sources held no readable event.
func execRecordsFromSources(auditID string, sources [][]byte) ([]auditlog.ExecRecord, int) {
	parser := auditlog.NewParser(0)
	merger := auditlog.NewMerger(auditlog.MergerConfig{MaxRecords: 64})
	skipped := 0
	for _, src := range sources {
		raw, ok := eventBytes(src)
		if !ok {
			skipped++
			continue
		}
		evs := parser.ParseDocument(raw)
		if len(parser.Skips()) > 0 && len(evs) == 0 {
			skipped++
		}
		for _, ev := range evs {
			if ev.AuditID == auditID {
				merger.Add(ev)
			}
		}
	}
	return merger.Lookup(auditID), skipped
}

// eventBytes extracts the audit event JSON from one source document.
func eventBytes(src []byte) ([]byte, bool) {
	var doc struct {
		Correlator struct {
			AuditEvent string `json:"audit_event"`
		} `json:"correlator"`
		Kubernetes struct {
			Audit map[string]json.RawMessage `json:"audit"`
		} `json:"kubernetes"`
	}
	if json.Unmarshal(src, &doc) != nil {
		return nil, false
	}
	if doc.Correlator.AuditEvent != "" {
		return []byte(doc.Correlator.AuditEvent), true
	}
	ev := doc.Kubernetes.Audit
	if len(ev) == 0 {
		return nil, false
	}
	if raw, ok := ev["annotations"]; ok {
		var ann map[string]json.RawMessage
		if json.Unmarshal(raw, &ann) == nil {
			fixed := make(map[string]json.RawMessage, len(ann))
			for k, v := range ann {
				fixed[redot(k)] = v
			}
			b, err := json.Marshal(fixed)
			if err == nil {
				ev["annotations"] = b
			}
		}
	}
	b, err := json.Marshal(ev)
	return b, err == nil
}

// redot undoes the integration's dedotting of an annotation key. The
// prefix before "/" is a DNS subdomain, which cannot hold "_", so every
// "_" there was a ".".
func redot(k string) string {
	prefix, name, ok := strings.Cut(k, "/")
	if !ok {
		return k
	}
	return strings.ReplaceAll(prefix, "_", ".") + "/" + name
}
