package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
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
	burst := make([]Event, 0, maxBurst)
	waiter, err := newRingWaiter(p.objs.Events)
	if err != nil {
		return err
	}
	defer waiter.Close()
	stopWait := context.AfterFunc(ctx, func() { waiter.Close() })
	defer stopWait()
	for ctx.Err() == nil { // a flood's drains do not wait, so look here
		if time.Since(p.lastBeat) >= heartbeatEvery {
			p.beat()
			p.lastBeat = time.Now()
		}
		burst, err = p.drain(burst[:0], onBad)
		if len(burst) > 0 {
			fn(burst)
			clear(burst) // drop the strings the events held
		}
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
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
	return nil
}

// drain reads what the ring holds now, up to maxBurst events, from its
// mapped pages (ringView: no system call). It returns the error that ended
// the read, nil when the ring is empty or holds only a record the kernel
// is still writing (the next wait's deadline collects it).
func (p *Probe) drain(burst []Event, onBad func(error)) ([]Event, error) {
	_, err := p.ring.read(maxBurst-len(burst), func(frame []byte) {
		burst = p.decodeInto(burst, frame, onBad)
	})
	if errors.Is(err, errRingBusy) {
		err = nil
	}
	return burst, err
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
