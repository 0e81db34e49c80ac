package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// BatchWriter commits a batch; every Backend is one. Write must not keep
// the batch's slices once it returns: the Writer reuses them.
type BatchWriter interface {
	Write(ctx context.Context, b Batch) error
}

// Writer gathers rows from many Add calls into batches and commits each
// batch in one transaction from a single goroutine: when a batch reaches
// maxBatch rows, or maxDelay after its first row. Rows with the same key in
// one batch collapse to the last one added. Each Add lands whole in one
// transaction, so a crash loses at most the batch that was open.
//
// A failed commit keeps its rows and retries them with exponential backoff
// until the store takes them (space returns, the disk is remounted): the
// writer recovers by itself. While it fails, Healthy says why, AddDurable
// refuses at once with ErrUnavailable (the sender keeps its evidence and
// retries), and plain rows are held up to maxHeld, beyond which they are
// dropped and counted: capture goes on, and loss is never silent.
type Writer struct {
	dst        BatchWriter
	maxBatch   int
	maxDelay   time.Duration
	maxHeld    int
	onCommit   func(Batch, error)
	idleCommit bool
	minGap     time.Duration // idle commits at most this often
	durableGap time.Duration // ... or this often while a durable Add waits
	backoff    *backoff.ExponentialBackOff

	mu     sync.RWMutex // write-held only to close
	closed bool
	in     chan item
	done   chan struct{}

	// Owned by the loop goroutine.
	failing bool
	retry   *time.Timer
	// lost: rows were dropped, so a stored row may be older than the one
	// an exit follows; from then on every exit is written whole.
	lost bool

	batches, rows, dropped, refused, failures atomic.Int64
	lastErr                                   atomic.Pointer[error]
	health                                    atomic.Pointer[error] // nil while commits succeed
}

// ErrUnavailable refuses a durable Add while the store cannot be written.
var ErrUnavailable = errors.New("store unavailable")

// DefaultMaxHeld bounds the rows a failing writer keeps for its retries.
const DefaultMaxHeld = 20_000

// item is one Add, or a flush marker when ack is set. done, when set,
// hears the result of the commit that wrote b.
type item struct {
	b    Batch
	ack  chan error
	done chan<- error
	stop bool
}

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// WithCommitHook calls fn after every commit attempt, from the writer's
// goroutine, with the batch and the commit's error.
func WithCommitHook(fn func(Batch, error)) WriterOption {
	return func(w *Writer) { w.onCommit = fn }
}

// WithCommitWhenIdle commits as soon as nothing more is queued, instead of
// waiting up to maxDelay for company: group commit. Under load, rows queue
// while a commit runs, so batches still grow; idle, a row is stored within
// one commit's time.
func WithCommitWhenIdle() WriterOption {
	return func(w *Writer) { w.idleCommit = true }
}

// WithMinCommitGap spaces idle commits (WithCommitWhenIdle) at least gap
// apart: a commit's own cost (the WAL frames of every index page touched)
// is paid per commit, so a trickle of rows, each committed alone, cost
// several times what they cost together. A row then waits at most gap.
func WithMinCommitGap(gap time.Duration) WriterOption {
	return func(w *Writer) { w.minGap = gap }
}

// WithDurableGap lets a batch that holds a durable Add (AddDurable: a
// sender waits for it to be on disk) commit when gap has passed since the
// last commit, and at most gap after the Add, whatever WithMinCommitGap
// and maxDelay say: plain rows can then wait longer, sharing a commit's
// cost among more of them, without slowing an acknowledgement.
func WithDurableGap(gap time.Duration) WriterOption {
	return func(w *Writer) { w.durableGap = gap }
}

// WithRetry sets the backoff between attempts while commits fail: from
// initial, doubling up to max.
func WithRetry(initial, max time.Duration) WriterOption {
	return func(w *Writer) { w.backoff.InitialInterval, w.backoff.MaxInterval = initial, max }
}

// WithMaxHeld bounds the rows kept for retry while commits fail.
func WithMaxHeld(rows int) WriterOption {
	return func(w *Writer) { w.maxHeld = rows }
}

// WriterStats counts what a Writer did.
type WriterStats struct {
	Batches  int64 // transactions committed
	Rows     int64 // rows committed
	Dropped  int64 // rows lost: beyond maxHeld while failing, or still failing at Close
	Refused  int64 // rows of durable Adds refused while failing (their senders retry)
	Failures int64 // commit attempts that failed
}

// NewWriter starts a Writer that commits to dst. maxBatch < 1 means 1000,
// maxDelay <= 0 means one second.
func NewWriter(dst BatchWriter, maxBatch int, maxDelay time.Duration, opts ...WriterOption) *Writer {
	if maxBatch < 1 {
		maxBatch = 1000
	}
	if maxDelay <= 0 {
		maxDelay = time.Second
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 200*time.Millisecond, 5*time.Second, 0
	w := &Writer{
		dst:      dst,
		maxBatch: maxBatch,
		maxDelay: maxDelay,
		maxHeld:  DefaultMaxHeld,
		backoff:  bo,
		in:       make(chan item, 64),
		done:     make(chan struct{}),
		retry:    stoppedTimer(),
	}
	for _, o := range opts {
		o(w)
	}
	go w.loop()
	return w
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// Add queues b for the next batch. It blocks while the queue is full
// (backpressure), until ctx is done, and returns ErrClosed after Close.
func (w *Writer) Add(ctx context.Context, b Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return w.send(ctx, item{b: b})
}

// AddDurable adds b like Add, and later sends on done (which must have
// room for one value) the result of the commit that wrote it: nil once b is
// on disk, else why not (ErrUnavailable at once while the store fails). A
// source acknowledges evidence to its sender only on nil, so a crash never
// loses what was acknowledged.
func (w *Writer) AddDurable(ctx context.Context, b Batch, done chan<- error) error {
	if b.Len() == 0 {
		done <- nil
		return nil
	}
	return w.send(ctx, item{b: b, done: done})
}

// Flush commits everything added before it (one attempt, even while
// failing) and returns the first commit error since the previous Flush.
func (w *Writer) Flush(ctx context.Context) error {
	ack := make(chan error, 1)
	if err := w.send(ctx, item{ack: ack}); err != nil {
		return err
	}
	select {
	case err := <-ack:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Writer) send(ctx context.Context, it item) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	select {
	case w.in <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close commits what is pending, stops the writer and returns the first
// commit error since the last Flush, unless the writer recovered from it
// since; rows it still cannot write are counted as dropped. Later Adds
// return ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	ack := make(chan error, 1)
	w.in <- item{ack: ack, stop: true} // the loop runs until it takes this
	err := <-ack
	<-w.done
	return err
}

// Stats returns the writer's counters.
func (w *Writer) Stats() WriterStats {
	return WriterStats{Batches: w.batches.Load(), Rows: w.rows.Load(), Dropped: w.dropped.Load(),
		Refused: w.refused.Load(), Failures: w.failures.Load()}
}

func (w *Writer) loop() {
	defer close(w.done)
	var p pending
	var last time.Time // the latest commit's start
	timer := stoppedTimer()
	for {
		select {
		case it := <-w.in:
			if it.ack != nil {
				w.commit(&p)
				timer.Stop()
				if it.stop && p.rows > 0 {
					w.dropped.Add(int64(p.rows)) // still failing at the end
					w.lost = true
				}
				var err error
				if e := w.lastErr.Swap(nil); e != nil {
					err = *e
				}
				it.ack <- err
				if it.stop {
					return
				}
				continue
			}
			if w.failing {
				w.hold(&p, it)
				continue
			}
			if p.rows == 0 {
				timer.Reset(w.maxDelay)
			}
			p.add(it.b, w.lost)
			if it.done != nil {
				if len(p.waiters) == 0 && w.durableGap > 0 {
					timer.Reset(w.durableGap) // a durable row waits no longer than this
				}
				p.waiters = append(p.waiters, it.done)
			}
			switch {
			case p.rows >= w.maxBatch:
			case w.idleCommit && len(w.in) == 0:
				gap := w.minGap
				if len(p.waiters) > 0 && w.durableGap > 0 {
					gap = w.durableGap
				}
				if wait := gap - time.Since(last); wait > 0 {
					timer.Reset(min(wait, w.maxDelay))
					continue
				}
			default:
				continue
			}
			last = time.Now()
			w.commit(&p)
			timer.Stop()
		case <-timer.C:
			last = time.Now()
			w.commit(&p)
		case <-w.retry.C:
			w.commit(&p)
		}
	}
}

// hold takes an Add while commits fail: a durable one is refused so its
// sender keeps the evidence, a plain one waits for the retry within maxHeld.
func (w *Writer) hold(p *pending, it item) {
	n := int64(it.b.Len())
	switch {
	case it.done != nil:
		w.refused.Add(n)
		it.done <- fmt.Errorf("%w: %w", ErrUnavailable, w.Healthy())
	case p.rows+p.newRows(it.b) > w.maxHeld:
		w.dropped.Add(n)
		w.lost = true
	default:
		p.add(it.b, w.lost)
	}
}

// commit writes the pending batch once. On success it resets p; on failure
// p keeps its rows for the retry the backoff schedules, and its waiters
// hear the error now (a sender's resend is idempotent).
func (w *Writer) commit(p *pending) {
	if p.rows == 0 {
		return
	}
	b := p.batch()
	n := int64(b.Len())
	waiters := p.waiters
	p.waiters = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := w.dst.Write(ctx, b)
	cancel()
	if w.onCommit != nil {
		w.onCommit(b, err)
	}
	if err != nil {
		w.failures.Add(1)
		err = fmt.Errorf("writing batch of %d rows: %w", n, err)
		w.lastErr.CompareAndSwap(nil, &err)
		w.health.Store(&err)
		if !w.failing {
			w.failing = true
			w.backoff.Reset()
		}
		w.retry.Reset(w.backoff.NextBackOff())
	} else {
		p.reset(w.onCommit == nil)
		w.batches.Add(1)
		w.rows.Add(n)
		w.health.Store(nil)
		if w.failing {
			// Recovered: the held rows are in, so the failure cost nothing
			// and Flush or Close has no loss to report.
			w.lastErr.Store(nil)
		}
		w.failing = false
		w.retry.Stop()
	}
	for _, d := range waiters {
		d <- err
	}
}

// Healthy returns why the store cannot be written, nil while the latest
// commit succeeded: readiness reports a store that cannot be written.
func (w *Writer) Healthy() error {
	if e := w.health.Load(); e != nil {
		return *e
	}
	return nil
}
