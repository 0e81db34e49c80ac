package capture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/rs/zerolog"
)

// Filter is what `correlator capture` prints.
type Filter struct {
	// ContainersOnly keeps the processes that run in a container.
	ContainersOnly bool
	// WithIDOnly keeps the processes that carry or claim an ID.
	WithIDOnly bool
}

// Keep reports whether ev passes the filter.
func (f Filter) Keep(ev Event) bool {
	if f.ContainersOnly && ev.ContainerID == "" {
		return false
	}
	return !f.WithIDOnly || ev.AuditID != "" || ev.ClaimedAuditID != "" || len(ev.Keys) > 0
}

// CheckPins refuses what would make `correlator capture` touch pins
// it was not asked to, or another process's: a --pin-path without --pin,
// and --pin where a live agent reads (the same build would share its ring;
// another would take its probes over and remove its pins). A reader found
// gone (writerState) leaves its pins to be taken over at once.
func CheckPins(pin, pinPathSet bool, pinPath string) error {
	switch {
	case !pin && pinPathSet:
		return errors.New("validating --pin-path: capture pins only with --pin (without it nothing is pinned and nothing stays in the kernel)")
	case !pin:
		return nil
	}
	if r, ok := LiveReader(pinPath); ok {
		return pinsInUse(r, pinPath)
	}
	return nil
}

// pinsInUse says who reads the pins and what to do: for a reader that could
// not be looked up, also how long until its pins count as left.
func pinsInUse(r Reader, pinPath string) error {
	const instead = "run capture without --pin (its own probes, beside the agent's) or give another --pin-path"
	if r.Seen {
		return fmt.Errorf("validating --pin: process %d (an agent?) is reading the probes pinned in %s (heartbeat %s ago); "+
			"capture --pin there would share or take over its probes: %s", r.PID, r.Dir, r.Since.Round(time.Millisecond), instead)
	}
	wait := time.Duration(math.Ceil(r.Wait.Seconds())) * time.Second
	return fmt.Errorf("validating --pin: process %d (an agent?) may be reading the probes pinned in %s (heartbeat %s ago), "+
		"and whether it still runs cannot be checked: %s; if it is gone, capture --pin there is accepted in %s, "+
		"or at once after `correlator uninstall --pin-path %s`; meanwhile %s",
		r.PID, r.Dir, r.Since.Round(time.Millisecond), r.Unseen, wait, pinPath, instead)
}

// LogKernelState says, once the probes are attached, what they leave in
// the kernel when this process exits.
func LogKernelState(log zerolog.Logger, cfg Config) {
	ev := log.Info().Str("component", "capture")
	if cfg.PinPath == "" {
		ev.Msg("probes not pinned: they are detached when this process exits")
		return
	}
	ev.Str("pin_path", cfg.PinPath).Msg("probes pinned: they keep running in the kernel after this process exits, until `correlator uninstall --pin-path " + cfg.PinPath + "`")
}

// Stream loads and attaches the probes and writes every event f keeps to
// w as a JSON line, the processes procfs shows first, until ctx ends.
func Stream(ctx context.Context, cfg Config, f Filter, w io.Writer, log zerolog.Logger) error {
	p, err := Load(cfg, log)
	if err != nil {
		return err
	}
	// A start that fails to attach leaves none of the pins it made.
	if err := p.Attach(); err != nil {
		return errors.Join(err, p.Discard())
	}
	defer p.Close()
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := json.NewEncoder(out)
	// Flush when the ring is drained, and at least every flush interval:
	// on a busy host the ring is never empty, and a filtered line must
	// not sit in the buffer waiting for it.
	lastFlush := time.Now()
	emit := func(ev Event) {
		if f.Keep(ev) {
			_ = enc.Encode(ev)
		}
		if out.Buffered() > 0 && (p.Backlog() == 0 || time.Since(lastFlush) >= cfg.FlushInterval) {
			out.Flush()
			lastFlush = time.Now()
		}
	}
	LogKernelState(log, cfg)
	boot, err := p.Bootstrap()
	if err != nil {
		log.Warn().Err(err).Str("component", "capture").Msg("bootstrapping from procfs")
	}
	for _, ev := range boot {
		emit(ev)
	}
	out.Flush()
	log.Info().Str("component", "capture").Bool("resumed", p.Resumed()).Int("bootstrapped", len(boot)).Msg("capturing")
	return p.Run(ctx, emit, nil)
}
