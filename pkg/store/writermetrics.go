package store

import "github.com/prometheus/client_golang/prometheus"

// writerCollector exports the writer's rows by outcome: a commit that
// failed past its retries drops its rows, and that loss must show.
type writerCollector struct {
	w    *Writer
	rows *prometheus.Desc
}

// NewWriterCollector returns w's metrics, to register on the agent's registry.
func NewWriterCollector(w *Writer) prometheus.Collector {
	return &writerCollector{w: w, rows: prometheus.NewDesc("correlator_store_rows_total",
		"Rows the store writer handled, by outcome: committed, or dropped after a commit failed its retries.",
		[]string{"outcome"}, nil)}
}

func (c *writerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.rows }

func (c *writerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(s.Rows), "committed")
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(s.Dropped), "dropped")
}
