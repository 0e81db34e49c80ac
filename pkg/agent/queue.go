package agent

import (
	"context"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/meta"
)

// procItem is one queued capture event: an exec as it came, an exit as
// the join.Exit it becomes, so that a burst of exits (a pod's processes
// all ending) waits in 48 bytes each, not in whole capture.Events.
type procItem struct {
	exec *capture.Event
	exit *join.Exit
}

// maxBurst is the most events one queue place holds (ProcessBurst).
const maxBurst = 256

// itemOf is ev as it waits in the queue.
func itemOf(ev *capture.Event) procItem {
	if ev.Kind == capture.KindExit {
		e := join.ExitOf(ev)
		return procItem{exit: &e}
	}
	exec := *ev // only an exec is copied to the heap
	return procItem{exec: &exec}
}

// Process queues a capture event, waiting while the queue is full.
func (a *Agent) Process(ctx context.Context, ev capture.Event) error {
	return a.queue(ctx, []procItem{itemOf(&ev)})
}

// ProcessBurst queues the events the ring held at once (capture's
// RunBatches) in as few queue places as maxBurst allows, so the run loop
// wakes once for them all; evs is not kept.
func (a *Agent) ProcessBurst(ctx context.Context, evs []capture.Event) error {
	for len(evs) > 0 {
		n := min(len(evs), maxBurst)
		items := make([]procItem, n)
		for i := range items {
			items[i] = itemOf(&evs[i])
		}
		if err := a.queue(ctx, items); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

func (a *Agent) queue(ctx context.Context, items []procItem) error {
	select {
	case a.procs <- items:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxDrain bounds the capture events joined before their updates are
// emitted together: one evaluation, one store Add and one session lookup
// per batch instead of per event, while a burst never delays the first
// event's row by more than this many joins.
const maxDrain = 1024

// handleProcesses joins first and whatever bursts are queued behind it
// (up to maxDrain events), then emits their updates as one batch.
func (a *Agent) handleProcesses(ctx context.Context, first []procItem) {
	since := a.now()
	// One update per row the burst changed, not one per event: an exec
	// and its exit read together are output, stored and judged once.
	a.joiner.Hold()
	for _, it := range first {
		a.handleProcess(ctx, a.now(), it)
	}
	for n := len(first); n < maxDrain; {
		select {
		case items := <-a.procs:
			for _, it := range items {
				a.handleProcess(ctx, a.now(), it)
			}
			n += len(items)
		default:
			n = maxDrain
		}
	}
	a.emit(ctx, since, a.joiner.Release())
}

// handleProcess joins one capture event; its updates wait in the joiner's
// hold (handleProcesses).
func (a *Agent) handleProcess(ctx context.Context, now time.Time, it procItem) {
	if it.exit != nil {
		a.exits.Inc()
		a.joiner.AddExit(now, *it.exit)
		return
	}
	if ev := it.exec; ev.Kind == capture.KindExec {
		a.execs.Inc()
		var info meta.Info
		if a.meta != nil && (ev.ContainerID != "" || ev.PodUID != "") {
			var err error
			if info, _, err = a.meta.Resolve(ctx, ev.ContainerID, ev.PodUID); err != nil {
				a.log.Debug().Err(err).Str("container", ev.ContainerID).Msg("resolving pod metadata")
			}
			a.labels.set(&info)
		}
		a.joiner.AddProcess(now, join.ProcessOf(ev, info.Namespace, info.Pod, info.Container, info.PodUID))
	}
}
