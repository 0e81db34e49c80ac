// Package agent is correlator's pipeline: capture events and audit records
// in, joined sessions and processes out to the store. One goroutine owns
// the merger and the joiner, so neither needs locks and the order of work
// is the order of arrival.
package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/meta"
	"github.com/execid/correlator/pkg/store"
)

// Config tunes the pipeline.
type Config struct {
	Join join.Config
	// Queue bounds the events waiting for the joiner, in places of up to
	// maxBurst (a single event takes a whole place). A full queue blocks
	// the ring-buffer reader (the kernel counts what it then drops) and
	// answers the audit webhook 429, so nothing is lost silently.
	Queue int
	// ExpireEvery is how often pending processes are checked against the TTL.
	ExpireEvery time.Duration
	// MaxRecords and MaxRecordBytes bound the audit stage merger, by count
	// and by estimated heap. It only needs a request until its stages are
	// in; the joiner keeps the records processes need.
	MaxRecords     int
	MaxRecordBytes int
	// RecordDoneIdle and RecordOpenIdle let the merger forget a request
	// no stage reached for that long: one whose ending stage is in (only a
	// redelivery follows), one still open (a session sends its ending
	// stage when it ends). Without them it held every request until its
	// caps, the agent's heap growing for hours (make soak); a stage that
	// comes after reaches the joiner alone, which folds it into what it
	// holds (auditlog.Fold).
	RecordDoneIdle, RecordOpenIdle time.Duration
	// AuditQueueBytes bounds the estimated heap of the audit batches
	// waiting for the joiner; past it the webhook answers 429.
	AuditQueueBytes int
	// MaxPodLabels and MaxPodLabelBytes bound the pod labels kept for the
	// alert rules (see podLabelCache), by pods and by estimated heap.
	MaxPodLabels     int
	MaxPodLabelBytes int
	// MaxDeferredAlerts bounds the processes held for their attribution to
	// settle before the alert rules that read it judge them (see
	// alerts_wait.go); past it the oldest is judged at once, its alerts
	// marked early.
	MaxDeferredAlerts int
	// LookupDelay is how long after a process first waits for its ID's
	// record the agent asks its lookups (its store, Elasticsearch) for
	// it: a record on its way comes through the sources within the audit
	// lag. 0 asks at once. pkg/node sets it to Join.AuditLag.
	LookupDelay time.Duration
	// MemoryLimit caps the Go soft memory limit the agent sets to keep its
	// footprint near what it holds (footprint): the container's, which
	// the command sets from the cgroup; 0: none.
	MemoryLimit int64
}

// Defaults for Config.
const (
	DefaultQueue          = 65536
	DefaultMaxRecords     = 10_000
	DefaultMaxRecordBytes = 24 << 20
	// The apiserver's webhook backend retries a batch for about 2 minutes
	// (docs/runbook.md); a redelivery after that is folded by the joiner.
	DefaultRecordDoneIdle  = 2 * time.Minute
	DefaultRecordOpenIdle  = time.Hour
	DefaultAuditQueueBytes = 32 << 20
	// A node runs a few hundred pods at most (the kubelet's --max-pods).
	DefaultMaxPodLabels     = 4096
	DefaultMaxPodLabelBytes = 4 << 20
	// Only processes a rule that reads attribution matched wait: forged
	// roots, debug containers before their record.
	DefaultMaxDeferredAlerts = 4096
	// DefaultLookupDelay is the joiner's audit lag: kube-apiserver's
	// webhook batches wait up to 30 s.
	DefaultLookupDelay = join.DefaultAuditLag
)

// ErrInvalidConfig marks a Config that Validate refused.
var ErrInvalidConfig = errors.New("invalid agent config")

// Default returns the shipped pipeline settings.
func Default() Config {
	return Config{Join: join.DefaultConfig(), Queue: DefaultQueue, ExpireEvery: time.Second,
		MaxRecords: DefaultMaxRecords, MaxRecordBytes: DefaultMaxRecordBytes,
		RecordDoneIdle: DefaultRecordDoneIdle, RecordOpenIdle: DefaultRecordOpenIdle, AuditQueueBytes: DefaultAuditQueueBytes,
		MaxPodLabels: DefaultMaxPodLabels, MaxPodLabelBytes: DefaultMaxPodLabelBytes, MaxDeferredAlerts: DefaultMaxDeferredAlerts,
		LookupDelay: DefaultLookupDelay}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	if err := c.Join.Validate(); err != nil {
		return err
	}
	if c.Queue <= 0 || c.ExpireEvery <= 0 || c.MaxRecords <= 0 || c.MaxRecordBytes <= 0 || c.AuditQueueBytes <= 0 ||
		c.MaxPodLabels <= 0 || c.MaxPodLabelBytes <= 0 || c.MaxDeferredAlerts <= 0 || c.RecordDoneIdle <= 0 ||
		c.RecordOpenIdle <= 0 || c.LookupDelay < 0 {
		return fmt.Errorf("validating agent config (queue %d, expiry %v, records %d, record bytes %d, audit queue bytes %d, "+
			"pod labels %d, pod label bytes %d, deferred alerts %d, record idle %v and %v; lookup delay %v not negative): must be positive: %w",
			c.Queue, c.ExpireEvery, c.MaxRecords, c.MaxRecordBytes, c.AuditQueueBytes, c.MaxPodLabels, c.MaxPodLabelBytes,
			c.MaxDeferredAlerts, c.RecordDoneIdle, c.RecordOpenIdle, c.LookupDelay, ErrInvalidConfig)
	}
	return nil
}

// Resolver maps a container to its pod.
type Resolver interface {
	Resolve(ctx context.Context, containerID, podUID string) (meta.Info, bool, error)
}

// Sink receives what changed; *store.Writer is the production sink.
type Sink interface {
	Add(ctx context.Context, b store.Batch) error
}

type auditBatch struct {
	evs   []auditlog.Event
	bytes int64      // estimated heap, counted in Agent.auditBytes
	done  chan error // hears when the batch's evidence is on disk
}

// durableSink is a Sink that reports when a batch is committed;
// *store.Writer is one.
type durableSink interface {
	AddDurable(ctx context.Context, b store.Batch, done chan<- error) error
}

// Agent runs the pipeline.
type Agent struct {
	cfg    Config
	log    zerolog.Logger
	joiner *join.Joiner
	merger *auditlog.Merger
	meta   Resolver
	sink   Sink
	procs  chan []procItem // bursts; pointers: a full-size buffer would be held even when idle
	audit  chan auditBatch
	now    func() time.Time
	events *prometheus.CounterVec
	// execs and exits are events' two per-exec children, looked up once:
	// a label lookup hashes its values on every exec.
	execs, exits prometheus.Counter
	latency      prometheus.Histogram

	auditBytes atomic.Int64 // estimated heap of the queued audit batches

	stats    atomic.Pointer[lossStats] // the run loop's latest snapshot, for scrapes
	release  memoryRelease             // owned by the run loop
	mem      *footprint                // likewise
	sessions sessionCache              // likewise

	alerter       Alerter
	outlet        AlertOutlet
	alertFailures prometheus.Counter
	labels        *podLabelCache // nil without alerts
	waits         *alertWaits    // owned by the run loop
	lookup        *lookupState
	resolved      *resolutions // alerts raised per process, owned by the run loop (resolutions.go)

	late            *lateMetrics
	restorer        ProcessLister // nil: nothing read back at start (late.go)
	restoreMax      int
	restoreFailures prometheus.Counter
}

// New builds an agent. reg may be nil.
func New(cfg Config, res Resolver, sink Sink, log zerolog.Logger, reg prometheus.Registerer, opts ...Option) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	j, err := join.New(cfg.Join, log)
	if err != nil {
		return nil, fmt.Errorf("creating joiner: %w", err)
	}
	f := promauto.With(reg)
	a := &Agent{
		cfg: cfg, log: log.With().Str("component", "agent").Logger(), joiner: j,
		merger: auditlog.NewMerger(auditlog.MergerConfig{MaxRecords: cfg.MaxRecords, MaxBytes: cfg.MaxRecordBytes,
			Size: join.RecordBytes, DoneIdle: cfg.RecordDoneIdle, OpenIdle: cfg.RecordOpenIdle}),
		meta: res, sink: sink, now: time.Now, mem: newFootprint(cfg.MemoryLimit),
		procs: make(chan []procItem, max(1, cfg.Queue/maxBurst)), audit: make(chan auditBatch, 64),
		events: f.NewCounterVec(prometheus.CounterOpts{Name: "correlator_agent_events_total",
			Help: "Events taken into the join, by kind."}, []string{"kind"}),
		latency: f.NewHistogram(prometheus.HistogramOpts{Name: "correlator_agent_stage_seconds",
			Help:    "Time from an event's arrival at the agent to its updates reaching the store writer.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10)}),
		alertFailures: f.NewCounter(prometheus.CounterOpts{Name: "correlator_agent_alert_submit_failures_total",
			Help: "Alert batches the agent could not hand to the delivery spools (they stay in the store)."}),
	}
	a.execs, a.exits = a.events.WithLabelValues("exec"), a.events.WithLabelValues("exit")
	a.late = newLateMetrics(f)
	a.restoreFailures = f.NewCounter(prometheus.CounterOpts{Name: "correlator_agent_restore_failures_total",
		Help: "Start-up reads of the store's unattributed processes that failed or hit their bound: the processes " +
			"not read back keep their stored answer even if their record comes late."})
	a.resolved = newResolutions(f)
	for _, o := range opts {
		o(a)
	}
	a.waits = newAlertWaits(cfg.MaxDeferredAlerts, cfg.Join.PendingTTL, f)
	if a.alerter != nil {
		a.labels = newPodLabelCache(cfg.MaxPodLabels, cfg.MaxPodLabelBytes)
	}
	if reg != nil {
		reg.MustRegister(newJoinCollector(&a.stats))
		if a.lookup != nil {
			reg.MustRegister(a.lookup.requests)
		}
	}
	return a, nil
}

// AuditSink accepts audit events from the file tailer and the webhook. It
// returns once their stages are committed to the store, so a source
// acknowledges (answers 2xx, advances its checkpoint) only what a crash
// cannot lose; ErrBusy when the queue is full (in batches, or in bytes
// while anything is queued), so the sender retries.
func (a *Agent) AuditSink() auditlog.Sink {
	return func(ctx context.Context, evs []auditlog.Event) error {
		n := eventsBytes(evs)
		if q := a.auditBytes.Add(n); q > int64(a.cfg.AuditQueueBytes) && q > n {
			a.auditBytes.Add(-n)
			return auditlog.ErrBusy
		}
		done := make(chan error, 1)
		select {
		// The sources reuse evs after we return (auditlog.Sink's contract).
		case a.audit <- auditBatch{evs: slices.Clone(evs), bytes: n, done: done}:
		case <-ctx.Done():
			a.auditBytes.Add(-n)
			return ctx.Err()
		default:
			a.auditBytes.Add(-n)
			return auditlog.ErrBusy
		}
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("storing audit events: %w", err)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run owns the joiner until ctx ends, then drains what was queued.
func (a *Agent) Run(ctx context.Context) error {
	tick := time.NewTicker(a.cfg.ExpireEvery)
	defer tick.Stop()
	a.mem.start()
	defer a.mem.restore()
	a.restore(ctx)
	var looked chan lookedUp
	if a.lookup != nil {
		a.lookup.run(ctx)
		looked = a.lookup.results
	}
	for {
		select {
		case l := <-looked:
			now := a.now()
			// The roots first: a record must not meet a root's descendant
			// before the roots that hold its requests are known again.
			a.emit(ctx, now, a.joiner.RestoreRoots(now, l.id, l.roots))
			for _, rec := range l.recs {
				a.addRecord(ctx, now, rec)
			}
		case items := <-a.procs:
			a.handleProcesses(ctx, items)
		case b := <-a.audit:
			a.handleAudit(ctx, b)
		case <-tick.C:
			a.emit(ctx, a.now(), a.joiner.Expire(a.now()))
			a.merger.Expire(a.now())
			a.lookupsDue(a.now())
			a.expireAlertWaits(ctx, a.now())
			a.publishStats()
		case <-ctx.Done():
			a.drain()
			return nil
		}
	}
}

// drain applies everything still queued, with a fresh context so the
// final writes are not cancelled with the agent.
func (a *Agent) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		select {
		case items := <-a.procs:
			a.handleProcesses(ctx, items)
		case b := <-a.audit:
			a.handleAudit(ctx, b)
		default:
			a.stopAlertWaits(ctx)
			return
		}
	}
}

func (a *Agent) handleAudit(ctx context.Context, b auditBatch) {
	now := a.now()
	var raw []store.AuditRecord
	for i := range b.evs {
		a.events.WithLabelValues("audit").Inc()
		res := a.merger.Add(b.evs[i])
		// A redelivery is stored again (the store keeps one row per
		// stage): the sender resends only what it was refused, and that
		// refusal may have come after the merger had seen it.
		if len(res.Updated) > 0 || res.Duplicate {
			raw = append(raw, a.auditRecord(&b.evs[i]))
		}
		for _, rec := range res.Updated {
			a.addRecord(ctx, now, rec)
		}
	}
	// The batch is no longer queued: what the merger and the joiner keep
	// they count themselves. Uncount it before the sender can hear back,
	// so that its next batch finds the queue as it now is.
	a.auditBytes.Add(-b.bytes)
	// The stages themselves, kept as evidence beside the session; the
	// source hears back only when they are durable.
	done := b.done // AuditSink always sets it, with room for the answer
	if len(raw) == 0 {
		done <- nil // nothing new: duplicates, or stages already held
		return
	}
	batch := store.Batch{AuditRecords: raw}
	ds, durable := a.sink.(durableSink)
	var err error
	if durable {
		err = ds.AddDurable(ctx, batch, done) // on success the writer answers done
	} else {
		err = a.sink.Add(ctx, batch)
	}
	if err != nil {
		a.log.Error().Err(err).Int("records", len(raw)).Msg("queueing audit records")
	}
	if err != nil || !durable {
		done <- err
	}
}

// emit turns the joiner's updates into one store batch.
func (a *Agent) emit(ctx context.Context, since time.Time, ups []join.Update) {
	if len(ups) == 0 {
		return
	}
	var b store.Batch
	// Sized to the whole rows alone: about half the updates are exits,
	// and a slice for all of them was nearly a tenth of what the agent
	// allocated under the soak.
	whole := 0
	for _, u := range ups {
		if u.Process != nil && !u.ExitOnly {
			whole++
		}
	}
	b.Processes = make([]join.Process, 0, whole)
	for _, u := range ups {
		if u.Session != nil {
			b.Sessions = append(b.Sessions, *u.Session)
		}
		switch {
		case u.Process != nil && u.ExitOnly:
			b.Exits = append(b.Exits, *u.Process)
		case u.Process != nil:
			b.Processes = append(b.Processes, *u.Process)
		}
	}
	// Then what a late record contradicts among the alerts raised before.
	b.Alerts = append(a.evaluate(&b, since), a.resolveLate(ctx, &b, since)...)
	if err := a.sink.Add(ctx, b); err != nil {
		a.log.Error().Err(err).Int("sessions", len(b.Sessions)).Int("processes", len(b.Processes)+len(b.Exits)).Msg("queueing store batch")
	}
	a.latency.Observe(time.Since(since).Seconds())
	a.deliver(ctx, b.Alerts)
	a.wantLookups(a.now(), &b)
}

// Stats exposes the joiner's counters.
func (a *Agent) Stats() join.Stats { return a.joiner.Stats() }
