package store

import "github.com/prometheus/client_golang/prometheus"

// writerCollector exports what the writer did with every row, and whether
// the store can be written now: loss and refusals must show.
type writerCollector struct {
	w                         *Writer
	rows, failures, available *prometheus.Desc
}

// NewWriterCollector returns w's metrics, to register on the agent's registry.
func NewWriterCollector(w *Writer) prometheus.Collector {
	return &writerCollector{w: w,
		rows: prometheus.NewDesc("correlator_store_rows_total",
			"Rows the store writer handled, by outcome: committed; dropped (beyond the rows held while the store failed, or unwritable at shutdown); refused (durable audit evidence turned back while the store failed: its sender retries).",
			[]string{"outcome"}, nil),
		failures: prometheus.NewDesc("correlator_store_commit_failures_total",
			"Store commits that failed (disk full, I/O error); the rows are held and retried with backoff.", nil, nil),
		available: prometheus.NewDesc("correlator_store_writable",
			"1 while the latest store commit succeeded, 0 while commits fail.", nil, nil),
	}
}

func (c *writerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.failures
	ch <- c.available
}

func (c *writerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(s.Rows), "committed")
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(s.Dropped), "dropped")
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(s.Refused), "refused")
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(s.Failures))
	writable := 1.0
	if c.w.Healthy() != nil {
		writable = 0
	}
	ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, writable)
}
