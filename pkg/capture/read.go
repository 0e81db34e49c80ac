package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// Run reads events until ctx ends or the probe is closed, calling fn for
// each. Frames that do not decode are logged and counted, never fatal.
func (p *Probe) Run(ctx context.Context, fn func(Event), onBad func(error)) error {
	return p.RunBatches(ctx, func(evs []Event) {
		for _, ev := range evs {
			fn(ev)
		}
	}, onBad)
}

// maxBurst bounds the events RunBatches hands over in one call.
const maxBurst = 256

// RunBatches is Run handing over in one call the events the ring held at
// once (up to maxBurst), so that a consumer on another goroutine is woken
// once a burst, not once an event. fn must not keep evs.
func (p *Probe) RunBatches(ctx context.Context, fn func([]Event), onBad func(error)) error {
	stop := context.AfterFunc(ctx, func() { p.reader.Close() })
	defer stop()
	for lo := 0; lo < len(p.pending); lo += maxBurst {
		fn(p.pending[lo:min(lo+maxBurst, len(p.pending))])
	}
	p.pending = nil
	for range p.badOld {
		if onBad != nil {
			onBad(errors.New("decoding an old build's frame"))
		}
	}
	p.badOld = 0
	var rec ringbuf.Record
	burst := make([]Event, 0, maxBurst)
	waiter, err := newRingWaiter(p.objs.Events)
	if err != nil {
		return err
	}
	defer waiter.Close()
	stopWait := context.AfterFunc(ctx, func() { waiter.Close() })
	defer stopWait()
	for {
		if time.Since(p.lastBeat) >= heartbeatEvery {
			p.beat()
			p.lastBeat = time.Now()
		}
		burst, err = p.drain(&rec, burst[:0], onBad)
		if len(burst) > 0 {
			fn(burst)
			clear(burst) // drop the strings the events held
		}
		if err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("reading ring buffer: %w", err)
		}
		if len(burst) == maxBurst {
			continue // the ring may hold more: no wait
		}
		// The kernel wakes us only for a backlog; FlushInterval collects
		// the quiet trickle. The wait is on the netpoller (ringWaiter).
		if err := waiter.wait(p.cfg.FlushInterval); err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("waiting on the ring buffer: %w", err)
		}
	}
}

// drain reads what the ring holds now, up to maxBurst events, without
// waiting: the deadline is already past, so the reader's epoll_wait
// returns at once. It returns the error that ended the read, nil when the
// ring is empty.
func (p *Probe) drain(rec *ringbuf.Record, burst []Event, onBad func(error)) ([]Event, error) {
	p.reader.SetDeadline(time.Unix(1, 0))
	for len(burst) < maxBurst {
		if err := p.reader.ReadInto(rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return burst, nil
			}
			return burst, err
		}
		burst = p.decodeInto(burst, rec.RawSample, onBad)
	}
	return burst, nil
}

// decodeInto appends the event in frame to evs; a frame that does not
// decode is logged and counted.
func (p *Probe) decodeInto(evs []Event, frame []byte, onBad func(error)) []Event {
	ev, err := p.dec.Decode(frame)
	if err != nil {
		p.log.Warn().Err(err).Msg("dropping undecodable frame")
		if onBad != nil {
			onBad(err)
		}
		return evs
	}
	return append(evs, ev)
}
