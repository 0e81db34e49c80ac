package elasticsearch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/elastic/go-elasticsearch/v8/esutil"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// op is one bulk action. what names it in errors ("session <id>").
type op struct {
	index, action, id, what string
	body                    []byte
}

// outcome of one item in one bulk round.
type outcome int

const (
	pending   outcome = iota // no answer: the request failed whole
	done                     // acknowledged
	retryable                // rejected for load (429): send again
	failed                   // refused for good
)

// bulkMetrics count bulk items by result.
type bulkMetrics struct {
	items    *prometheus.CounterVec
	requests *prometheus.CounterVec
}

// newBulkMetrics registers the counters on reg (may be nil) under the
// given names, every result exported at zero.
func newBulkMetrics(reg prometheus.Registerer, itemsName, requestsName string) *bulkMetrics {
	f := promauto.With(reg)
	m := &bulkMetrics{
		items: f.NewCounterVec(prometheus.CounterOpts{
			Name: itemsName,
			Help: "Bulk items sent to Elasticsearch, by result (indexed, duplicate, retried, failed).",
		}, []string{"result"}),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: requestsName,
			Help: "Bulk requests sent to Elasticsearch, by result (ok, error).",
		}, []string{"result"}),
	}
	for _, r := range []string{"indexed", "duplicate", "retried", "failed"} {
		m.items.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.requests.WithLabelValues(r)
	}
	return m
}

// bulk sends ops and returns once every one is acknowledged, retrying
// rejected items and failed requests with exponential backoff. A create
// that finds its document already there (409) counts as acknowledged: that
// is how alerts stay insert-once. Items refused for good are named in the
// error; the rest of the batch is stored regardless (bulk is not atomic).
func (c *conn) bulk(ctx context.Context, m *bulkMetrics, ops []op) error {
	if len(ops) == 0 {
		return nil
	}
	bo := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.cfg.RetryInitial),
		backoff.WithMaxElapsedTime(c.cfg.RetryMaxElapsed)), ctx)
	todo := ops
	var refused []string
	for {
		res, reqErr := c.bulkOnce(ctx, m, todo)
		var again []op
		for i, o := range res {
			switch o.outcome {
			case done:
			case failed:
				m.items.WithLabelValues("failed").Inc()
				refused = append(refused, o.msg)
			default:
				again = append(again, todo[i])
			}
		}
		if len(again) == 0 {
			break
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			m.items.WithLabelValues("failed").Add(float64(len(again)))
			cause := "rejected for load"
			if reqErr != nil {
				cause = reqErr.Error()
			}
			if ctx.Err() != nil {
				cause = ctx.Err().Error()
			}
			return errors.Join(refusedErr(refused, len(ops)),
				fmt.Errorf("indexing %d of %d documents (%s): gave up retrying: %s", len(again), len(ops), opNames(again), cause))
		}
		m.items.WithLabelValues("retried").Add(float64(len(again)))
		select {
		case <-ctx.Done():
			return fmt.Errorf("indexing %d of %d documents (%s): %w", len(again), len(ops), opNames(again), ctx.Err())
		case <-time.After(wait):
		}
		todo = again
	}
	return refusedErr(refused, len(ops))
}

func refusedErr(refused []string, total int) error {
	if len(refused) == 0 {
		return nil
	}
	shown := refused
	if len(shown) > 10 {
		shown = shown[:10]
	}
	more := ""
	if len(refused) > len(shown) {
		more = fmt.Sprintf("; and %d more", len(refused)-len(shown))
	}
	return fmt.Errorf("indexing documents: %d of %d refused: %s%s", len(refused), total, strings.Join(shown, "; "), more)
}

func opNames(ops []op) string {
	var parts []string
	for i, o := range ops {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ops)-5))
			break
		}
		parts = append(parts, o.what)
	}
	return strings.Join(parts, ", ")
}

type itemResult struct {
	outcome outcome
	msg     string
}

// statusTransport remembers the status of the last bulk response, which
// BulkIndexer reports only as text.
type statusTransport struct {
	next interface {
		Perform(*http.Request) (*http.Response, error)
	}
	mu     sync.Mutex
	status int
}

func (t *statusTransport) Perform(r *http.Request) (*http.Response, error) {
	res, err := t.next.Perform(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.status = 0
	} else {
		t.status = res.StatusCode
	}
	return res, err
}

// updateRetries is an update item's retry_on_conflict.
const updateRetries = 3

// bulkOnce sends ops through one BulkIndexer and reports each item.
func (c *conn) bulkOnce(ctx context.Context, m *bulkMetrics, ops []op) ([]itemResult, error) {
	res := make([]itemResult, len(ops))
	st := &statusTransport{next: c.es}
	var mu sync.Mutex
	var reqErr error
	bi, err := esutil.NewBulkIndexer(esutil.BulkIndexerConfig{
		Client:        st,
		NumWorkers:    1, // one worker keeps a document's writes in order
		FlushBytes:    c.cfg.FlushBytes,
		FlushInterval: time.Hour, // Close flushes; nothing waits on a timer
		Refresh:       c.cfg.Refresh,
		OnError: func(_ context.Context, err error) {
			mu.Lock()
			reqErr = err
			mu.Unlock()
		},
		OnFlushEnd: func(context.Context) {},
	})
	if err != nil {
		return nil, fmt.Errorf("creating bulk indexer: %w", err)
	}
	for i, o := range ops {
		var body io.ReadSeeker
		if o.body != nil {
			body = bytes.NewReader(o.body)
		}
		item := esutil.BulkIndexerItem{
			Index: o.index, Action: o.action, DocumentID: o.id, Body: body,
			OnSuccess: func(context.Context, esutil.BulkIndexerItem, esutil.BulkIndexerResponseItem) {
				mu.Lock()
				res[i] = itemResult{outcome: done}
				mu.Unlock()
				m.items.WithLabelValues("indexed").Inc()
			},
			OnFailure: func(_ context.Context, _ esutil.BulkIndexerItem, r esutil.BulkIndexerResponseItem, err error) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					res[i] = itemResult{outcome: retryable}
				case r.Status == http.StatusConflict && o.action == "create":
					res[i] = itemResult{outcome: done}
					m.items.WithLabelValues("duplicate").Inc()
				case r.Status == http.StatusConflict && o.action == "update":
					res[i] = itemResult{outcome: retryable} // raced past updateRetries
				case r.Status == http.StatusNotFound && o.action == "delete":
					res[i] = itemResult{outcome: done} // already gone
				case r.Status == http.StatusTooManyRequests || r.Status >= 500:
					res[i] = itemResult{outcome: retryable}
				default:
					res[i] = itemResult{outcome: failed,
						msg: fmt.Sprintf("%s: %d %s: %s", o.what, r.Status, r.Error.Type, r.Error.Reason)}
				}
			},
		}
		if o.action == "update" {
			// Another agent's update of the same alert (its resolution
			// delivered twice) is retried by the cluster, not refused.
			retries := updateRetries
			item.RetryOnConflict = &retries
		}
		if err := bi.Add(ctx, item); err != nil {
			mu.Lock()
			res[i] = itemResult{outcome: pending}
			reqErr = err
			mu.Unlock()
			break
		}
	}
	if err := bi.Close(ctx); err != nil {
		mu.Lock()
		reqErr = err
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	if reqErr == nil {
		m.requests.WithLabelValues("ok").Inc()
		return res, nil
	}
	m.requests.WithLabelValues("error").Inc()
	st.mu.Lock()
	status := st.status
	st.mu.Unlock()
	// A request refused for a reason other than load (auth, a bad body)
	// will not get better by waiting: fail its unanswered items now.
	if status >= 400 && status < 500 && status != http.StatusTooManyRequests {
		for i := range res {
			if res[i].outcome == pending {
				res[i] = itemResult{outcome: failed, msg: fmt.Sprintf("%s: %v", ops[i].what, reqErr)}
			}
		}
	}
	return res, reqErr
}
