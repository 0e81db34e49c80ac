package capture

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the kernel's counters as monotonic Prometheus counters.
// It reads the per-CPU map at scrape time and never resets it, so a
// restarted scraper sees the same totals.
type Collector struct {
	p            *Probe
	drops        *prometheus.Desc
	lineageFull  *prometheus.Desc
	scanTrunc    *prometheus.Desc
	scanErrors   *prometheus.Desc
	placeErrors  *prometheus.Desc
	skipped      *prometheus.Desc
	decodeErrors prometheus.Counter
	events       *prometheus.CounterVec
	execs, exits prometheus.Counter // events' children
	unread       *prometheus.Desc
	windowDrops  *prometheus.Desc
	orphaned     *prometheus.Desc
	handover     *prometheus.Desc
	procfsRoots  *prometheus.Desc
}

// NewCollector returns the probe's metrics. Register it on the agent's
// registry; count decoded events with Observe and bad frames with BadFrame.
func NewCollector(p *Probe) *Collector {
	c := &Collector{
		p: p,
		drops: prometheus.NewDesc("correlator_capture_ringbuf_drops_total",
			"Events lost because the kernel ring buffer was full.", nil, nil),
		lineageFull: prometheus.NewDesc("correlator_capture_lineage_full_total",
			"Processes whose lineage could not be stored because the map was full.", nil, nil),
		scanTrunc: prometheus.NewDesc("correlator_capture_scan_truncated_total",
			"Execs whose environment exceeded the scan budget.", nil, nil),
		scanErrors: prometheus.NewDesc("correlator_capture_scan_errors_total",
			"Execs whose environment could not be read.", nil, nil),
		placeErrors: prometheus.NewDesc("correlator_capture_place_errors_total",
			"Processes whose image provenance could not be stored: their session roots read as unverified.", nil, nil),
		skipped: prometheus.NewDesc("correlator_capture_execs_skipped_total",
			"Execs the kernel did not send, by reason: host is outside every pod, with no lineage and no key (--capture-scope=pods).",
			[]string{"reason"}, nil),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "correlator_capture_decode_errors_total",
			Help: "Ring-buffer frames that did not decode.",
		}),
		unread: prometheus.NewDesc("correlator_capture_unread_window_seconds",
			"How long the pinned probes ran with no agent reading them before this agent started (0: nothing was pinned).", nil, nil),
		windowDrops: prometheus.NewDesc("correlator_capture_unread_window_drops",
			"Events the kernel ring could not hold while no agent read, before this agent started.", nil, nil),
		orphaned: prometheus.NewDesc("correlator_capture_orphaned_probes",
			"1 when this agent found pinned probes no agent had read for over 10 minutes (an agent removed without `correlator uninstall`).", nil, nil),
		handover: prometheus.NewDesc("correlator_capture_handover_lineage",
			"Lineage entries this agent took over at start from another build's pinned probes (an upgrade or rollback), by outcome.", []string{"outcome"}, nil),
		procfsRoots: prometheus.NewDesc("correlator_capture_procfs_roots",
			"Session roots found only through procfs at start (nothing was pinned): their provenance is unknown, flagged procfs_root.", nil, nil),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_capture_events_total",
			Help: "Process events decoded, by kind.",
		}, []string{"kind"}),
	}
	c.execs, c.exits = c.events.WithLabelValues(string(KindExec)), c.events.WithLabelValues(string(KindExit))
	return c
}

// Observe counts one decoded event. The exec and exit children are looked
// up once: a label lookup hashes its values on every event.
func (c *Collector) Observe(ev Event) {
	switch ev.Kind {
	case KindExec:
		c.execs.Inc()
	case KindExit:
		c.exits.Inc()
	default:
		c.events.WithLabelValues(string(ev.Kind)).Inc()
	}
}

// BadFrame counts one frame that did not decode.
func (c *Collector) BadFrame(error) { c.decodeErrors.Inc() }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.drops
	ch <- c.lineageFull
	ch <- c.scanTrunc
	ch <- c.scanErrors
	ch <- c.placeErrors
	ch <- c.unread
	ch <- c.windowDrops
	ch <- c.orphaned
	ch <- c.handover
	ch <- c.procfsRoots
	ch <- c.skipped
	c.decodeErrors.Describe(ch)
	c.events.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if s, err := c.p.Stats(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(s.RingbufDrops))
		ch <- prometheus.MustNewConstMetric(c.lineageFull, prometheus.CounterValue, float64(s.LineageFull))
		ch <- prometheus.MustNewConstMetric(c.scanTrunc, prometheus.CounterValue, float64(s.ScanTruncated))
		ch <- prometheus.MustNewConstMetric(c.scanErrors, prometheus.CounterValue, float64(s.ScanErrors))
		ch <- prometheus.MustNewConstMetric(c.placeErrors, prometheus.CounterValue, float64(s.PlaceErrors))
		ch <- prometheus.MustNewConstMetric(c.skipped, prometheus.CounterValue, float64(s.ExecsSkipped), "host")
	}
	w, hs := c.p.Window(), c.p.Handover()
	ch <- prometheus.MustNewConstMetric(c.unread, prometheus.GaugeValue, w.Unread.Seconds())
	ch <- prometheus.MustNewConstMetric(c.windowDrops, prometheus.GaugeValue, float64(w.Drops))
	ch <- prometheus.MustNewConstMetric(c.orphaned, prometheus.GaugeValue, b2f(w.Orphaned))
	ch <- prometheus.MustNewConstMetric(c.handover, prometheus.GaugeValue, float64(hs.Copied), "copied")
	ch <- prometheus.MustNewConstMetric(c.handover, prometheus.GaugeValue, float64(hs.Lost), "lost")
	ch <- prometheus.MustNewConstMetric(c.procfsRoots, prometheus.GaugeValue, float64(c.p.ProcfsRoots()))
	c.decodeErrors.Collect(ch)
	c.events.Collect(ch)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
