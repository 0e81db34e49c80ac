package delivery

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
)

// DispatcherConfig tunes a Dispatcher. Zero or negative fields take
// defaults.
type DispatcherConfig struct {
	// SpoolDir holds one spool directory per sink.
	SpoolDir string
	// SpoolMaxBytes and SpoolMaxEntries bound each sink's spool (defaults
	// 256 MiB and 1,000,000); when full, the oldest alerts are dropped, an
	// eighth of the bound at a time. Whatever the bound, a spool stops
	// short of the last SpoolMinFree bytes free on its filesystem (default
	// 64 KiB, kept for saving read positions): alerts that do not fit are
	// dropped as disk_full.
	SpoolMaxBytes   int64
	SpoolMaxEntries int
	SpoolMinFree    int64
	// BatchSize is the most alerts one Deliver call gets (default 500).
	BatchSize int
	// DeliverTimeout bounds one Deliver call (default 30s).
	DeliverTimeout time.Duration
	// InitialBackoff and MaxBackoff shape the retry delays, which grow
	// exponentially with ±50% jitter (defaults 500ms and 60s).
	InitialBackoff, MaxBackoff time.Duration
	// CloseTimeout bounds Close's last delivery attempt (default 5s).
	CloseTimeout time.Duration
}

// withDefaults fills the fields that are zero or negative.
func (c DispatcherConfig) withDefaults() DispatcherConfig {
	c.SpoolMaxBytes = cmp.Or(max(c.SpoolMaxBytes, 0), 256<<20)
	c.SpoolMinFree = cmp.Or(max(c.SpoolMinFree, 0), 64<<10)
	c.SpoolMaxEntries = cmp.Or(max(c.SpoolMaxEntries, 0), 1_000_000)
	c.BatchSize = cmp.Or(max(c.BatchSize, 0), 500)
	c.DeliverTimeout = cmp.Or(max(c.DeliverTimeout, 0), 30*time.Second)
	c.InitialBackoff = cmp.Or(max(c.InitialBackoff, 0), 500*time.Millisecond)
	c.MaxBackoff = cmp.Or(max(c.MaxBackoff, 0), 60*time.Second)
	c.CloseTimeout = cmp.Or(max(c.CloseTimeout, 0), 5*time.Second)
	return c
}

// Dispatcher fans alerts out to sinks, each with its own spool and
// delivery loop.
type Dispatcher struct {
	cfg   DispatcherConfig
	log   zerolog.Logger
	m     *dispatchMetrics
	sinks []*sinkState

	stop     chan struct{} // closed by Close, stops Run
	stopOnce sync.Once
	running  sync.WaitGroup
}

type sinkState struct {
	d     Deliverer
	name  string
	spool *spool
	wake  chan struct{}
	ev    sinkEvents
	log   zerolog.Logger
}

// NewDispatcher opens a spool per sink under cfg.SpoolDir (what a previous
// run left there is delivered first) and registers its metrics on reg, if
// not nil (registering them twice panics).
func NewDispatcher(cfg DispatcherConfig, sinks []Deliverer, log zerolog.Logger, reg prometheus.Registerer) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if cfg.SpoolDir == "" {
		return nil, errors.New("creating alert dispatcher: no spool directory")
	}
	m := newDispatchMetrics(reg)
	d := &Dispatcher{cfg: cfg, log: log.With().Str("component", "alert-dispatcher").Logger(), m: m, stop: make(chan struct{})}
	seen := map[string]bool{}
	for _, s := range sinks {
		name := s.Name()
		if seen[name] {
			d.closeSpools()
			return nil, fmt.Errorf("creating alert dispatcher: sink %s given twice", name)
		}
		seen[name] = true
		sinkLog := d.log.With().Str("sink", name).Logger()
		ev := sinkEvents{m: m, sink: name, log: sinkLog}
		ev.init()
		sp, err := openSpool(filepath.Join(cfg.SpoolDir, spoolDirName(name)),
			spoolLimits{maxBytes: cfg.SpoolMaxBytes, maxEntries: cfg.SpoolMaxEntries, minFree: cfg.SpoolMinFree}, ev)
		if err != nil {
			d.closeSpools()
			return nil, fmt.Errorf("opening spool for sink %s: %w", name, err)
		}
		d.sinks = append(d.sinks, &sinkState{d: s, name: name, spool: sp, wake: make(chan struct{}, 1), ev: ev, log: sinkLog})
	}
	return d, nil
}

// spoolDirName is a readable, collision-free directory name for a sink.
func spoolDirName(name string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, name)
	if len(clean) > 48 {
		clean = clean[:48]
	}
	h := sha256.Sum256([]byte(name))
	return clean + "-" + hex.EncodeToString(h[:4])
}

// Submit writes the alerts to every sink's spool; once it returns nil they
// are on disk and will be delivered, across restarts, at least once. Alerts
// a spool cannot hold (its disk is full: the error wraps ErrDiskFull) are
// counted as dropped and logged; the other sinks still get them.
func (d *Dispatcher) Submit(ctx context.Context, alerts []store.Alert) error {
	if len(alerts) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	recs := make([][]byte, 0, len(alerts))
	for i := range alerts {
		b, err := json.Marshal(&alerts[i])
		if err != nil {
			return fmt.Errorf("encoding alert %s: %w", alerts[i].ID, err)
		}
		recs = append(recs, b)
	}
	var errs []error
	for _, s := range d.sinks {
		n, lost, err := s.spool.append(recs)
		s.ev.m.spooled.WithLabelValues(s.name).Add(float64(n))
		if err != nil {
			s.log.Error().Err(err).Str("reason", lossReason(err)).Int("dropped", lost).Int("spooled", n).
				Msg("dropping alerts the spool could not write")
			errs = append(errs, fmt.Errorf("spooling alerts for sink %s: %w", s.name, err))
		}
		if n == 0 {
			continue
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return errors.Join(errs...)
}

// Run delivers spooled alerts until ctx is done or Close is called.
func (d *Dispatcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for _, s := range d.sinks {
		wg.Add(1)
		d.running.Add(1)
		go func() {
			defer wg.Done()
			defer d.running.Done()
			d.loop(ctx, s)
		}()
	}
	wg.Wait()
	return nil
}

func (d *Dispatcher) loop(ctx context.Context, s *sinkState) {
	for ctx.Err() == nil {
		n, err := d.deliverBatch(ctx, s, true)
		if err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("delivering alerts")
		}
		if n > 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-time.After(time.Second): // a spool error, or a wake-up lost to a race
		}
	}
}

// deliverBatch sends the next batch, retrying (when retry) until it is
// delivered, rejected, or ctx ends; it returns how many alerts it consumed.
func (d *Dispatcher) deliverBatch(ctx context.Context, s *sinkState, retry bool) (int, error) {
	recs, next, err := s.spool.peek(d.cfg.BatchSize, 4<<20)
	if err != nil || len(recs) == 0 {
		return 0, err
	}
	alerts := make([]store.Alert, 0, len(recs))
	for _, r := range recs {
		var a store.Alert
		if err := json.Unmarshal(r, &a); err != nil {
			s.ev.dropped("corrupt", 1)
			continue
		}
		alerts = append(alerts, a)
	}
	attempt := 0
	op := func() error {
		if attempt > 0 {
			d.m.retries.WithLabelValues(s.name).Add(float64(len(alerts)))
		}
		attempt++
		if len(alerts) == 0 {
			return nil
		}
		actx, cancel := context.WithTimeout(ctx, d.cfg.DeliverTimeout)
		defer cancel()
		err := s.d.Deliver(actx, alerts)
		if err == nil {
			return nil
		}
		d.m.failures.WithLabelValues(s.name).Inc()
		if errors.Is(err, ErrRejected) {
			return backoff.Permanent(err)
		}
		return err
	}
	if retry {
		b := backoff.NewExponentialBackOff()
		b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = d.cfg.InitialBackoff, d.cfg.MaxBackoff, 0
		b.RandomizationFactor = 0.5
		err = backoff.RetryNotify(op, backoff.WithContext(b, ctx), func(err error, wait time.Duration) {
			s.log.Warn().Err(err).Int("alerts", len(alerts)).Dur("retry_in", wait).Msg("delivering alerts")
		})
	} else {
		err = op()
	}
	switch {
	case err == nil:
		d.m.sent.WithLabelValues(s.name).Add(float64(len(alerts)))
	case errors.Is(err, ErrRejected):
		s.ev.dropped("rejected", len(alerts))
		s.log.Error().Err(err).Int("alerts", len(alerts)).Msg("dropping alerts the receiver rejected")
	default:
		return 0, err // not delivered: stays in the spool
	}
	if err := s.spool.ack(next, len(recs)); err != nil {
		// Delivered, but a restart would send these again.
		s.log.Warn().Err(err).Int("alerts", len(recs)).Msg("saving the spool position after delivery")
	}
	return len(recs), nil
}

// Pending returns how many alerts wait in a sink's spool.
func (d *Dispatcher) Pending(sink string) int {
	for _, s := range d.sinks {
		if s.name == sink {
			return s.spool.depth()
		}
	}
	return 0
}

// Close stops Run, makes one last delivery attempt per sink (bounded by
// CloseTimeout), then closes spools and sinks. What is left stays spooled
// for the next start.
func (d *Dispatcher) Close() error {
	d.stopOnce.Do(func() { close(d.stop) })
	d.running.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.CloseTimeout)
	defer cancel()
	var errs []error
	for _, s := range d.sinks {
		for ctx.Err() == nil {
			n, err := d.deliverBatch(ctx, s, false)
			if err != nil {
				s.log.Warn().Err(err).Int("pending", s.spool.depth()).Msg("alerts left in the spool at close")
			}
			if n == 0 || err != nil {
				break
			}
		}
		if err := s.d.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing sink %s: %w", s.name, err))
		}
	}
	if err := d.closeSpools(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (d *Dispatcher) closeSpools() error {
	var errs []error
	for _, s := range d.sinks {
		if err := s.spool.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
