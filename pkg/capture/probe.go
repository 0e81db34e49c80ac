package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Probe owns the loaded BPF objects, their links and the ring-buffer reader.
type Probe struct {
	cfg     Config
	log     zerolog.Logger
	objs    correlatorObjects
	dec     *Decoder
	reader  *ringbuf.Reader
	mu      sync.Mutex
	links   []link.Link
	resumed bool // the lineage map was already pinned: a restart
}

// hook pairs a program with the tracepoint named in errors.
type hook struct {
	name string
	prog *ebpf.Program
}

func (p *Probe) hooks() []hook {
	return []hook{
		{"tp_btf/sched_process_exec", p.objs.HandleExec},
		{"tp_btf/sched_process_fork", p.objs.HandleFork},
		{"tp_btf/sched_process_exit", p.objs.HandleExit},
	}
}

// Load loads the programs with cfg's keys and budget, reusing a pinned
// lineage map when one exists. It does not attach.
func Load(cfg Config, log zerolog.Logger) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("removing memlock rlimit: %w", err)
	}
	spec, err := loadCorrelator()
	if err != nil {
		return nil, fmt.Errorf("loading BPF spec: %w", err)
	}
	if err := configureSpec(spec, cfg); err != nil {
		return nil, err
	}
	p := &Probe{cfg: cfg, log: log.With().Str("component", "capture").Logger()}
	opts := &ebpf.CollectionOptions{}
	if cfg.PinPath != "" {
		if err := ensureBPFFS(cfg.PinPath); err != nil {
			return nil, err
		}
		_, statErr := os.Stat(filepath.Join(cfg.PinPath, "lineage_map"))
		p.resumed = statErr == nil
		opts.Maps.PinPath = cfg.PinPath
	} else {
		spec.Maps["lineage_map"].Pinning = ebpf.PinNone
		spec.Maps["image_places"].Pinning = ebpf.PinNone
	}
	if err := spec.LoadAndAssign(&p.objs, opts); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("loading BPF objects: %+v", verr)
		}
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("loading BPF objects: pinned lineage map in %s is from another build or size; remove it with `rm -r %s` (live sessions lose their lineage): %w", cfg.PinPath, cfg.PinPath, err)
		}
		return nil, fmt.Errorf("loading BPF objects: %w", err)
	}
	p.reader, err = ringbuf.NewReader(p.objs.Events)
	if err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("opening ring buffer: %w", err)
	}
	boot, err := bootTime()
	if err != nil {
		p.Close()
		return nil, err
	}
	p.dec = NewDecoder(cfg.Keys, boot)
	return p, nil
}

func configureSpec(spec *ebpf.CollectionSpec, cfg Config) error {
	var (
		lens     [maxKeys]uint32
		prefixes [maxKeys]uint64
		masks    [maxKeys]uint64
		names    [maxKeys][maxKeyLen]uint8
	)
	argvKey := uint32(maxKeys) // none
	for i, k := range cfg.Keys {
		lens[i] = uint32(len(k))
		prefixes[i], masks[i] = keyPattern(k)
		copy(names[i][:], k)
		if k == cfg.BridgeKey {
			argvKey = uint32(i)
		}
	}
	for name, v := range map[string]any{
		"nkeys": uint32(len(cfg.Keys)), "key_len": lens, "key_prefix": prefixes, "argv_key": argvKey,
		"key_mask": masks, "key_name": names, "scan_budget": cfg.ScanBudget,
		"wakeup_bytes": uint64(min(cfg.WakeupBytes, cfg.RingBufferBytes/4)),
		"scope_all":    boolU32(cfg.Scope == ScopeAll),
	} {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("configuring BPF variable %s: not in the object", name)
		}
		if err := vs.Set(v); err != nil {
			return fmt.Errorf("configuring BPF variable %s: %w", name, err)
		}
	}
	spec.Maps["lineage_map"].MaxEntries = cfg.LineageEntries
	spec.Maps["events"].MaxEntries = cfg.RingBufferBytes
	return nil
}

// Resumed reports whether Load found pinned lineage from an earlier run.
func (p *Probe) Resumed() bool { return p.resumed }

// Decoder returns the probe's decoder.
func (p *Probe) Decoder() *Decoder { return p.dec }

// Attach attaches exec, fork and exit, in that order; on error it detaches
// what it attached.
func (p *Probe) Attach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.links) > 0 {
		return nil
	}
	for _, h := range p.hooks() {
		l, err := link.AttachTracing(link.TracingOptions{Program: h.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			p.detachLocked()
			return fmt.Errorf("attaching %s: %w", h.name, err)
		}
		p.links = append(p.links, l)
	}
	return nil
}

// Detach closes the links in reverse order. Pinned lineage survives.
func (p *Probe) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detachLocked()
}

func (p *Probe) detachLocked() error {
	var errs []error
	for i := len(p.links) - 1; i >= 0; i-- {
		if err := p.links[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing link %d: %w", i, err))
		}
	}
	p.links = nil
	return errors.Join(errs...)
}

// Run reads events until ctx ends or the probe is closed, calling fn for
// each. Frames that do not decode are logged and counted, never fatal.
func (p *Probe) Run(ctx context.Context, fn func(Event), onBad func(error)) error {
	stop := context.AfterFunc(ctx, func() { p.reader.Close() })
	defer stop()
	var rec ringbuf.Record
	for {
		// The kernel wakes us only for a backlog; the deadline collects
		// the quiet trickle (see Config.FlushInterval).
		p.reader.SetDeadline(time.Now().Add(p.cfg.FlushInterval))
		if err := p.reader.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("reading ring buffer: %w", err)
		}
		ev, err := p.dec.Decode(rec.RawSample)
		if err != nil {
			p.log.Warn().Err(err).Msg("dropping undecodable frame")
			if onBad != nil {
				onBad(err)
			}
			continue
		}
		fn(ev)
	}
}

// Close detaches, then closes the reader and the objects (cancel, wait,
// links, objects). Pinned maps stay pinned.
func (p *Probe) Close() error {
	errs := []error{p.Detach()}
	if p.reader != nil {
		errs = append(errs, p.reader.Close())
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// Stats are the kernel's monotonic counters, summed over CPUs.
type Stats struct {
	RingbufDrops  uint64
	LineageFull   uint64
	ScanTruncated uint64
	ScanErrors    uint64
	PlaceErrors   uint64
	ExecsSkipped  uint64 // out of scope (Config.Scope): host, no lineage, no key
}

// Stats reads the per-CPU counters. They are never reset.
func (p *Probe) Stats() (Stats, error) {
	var s Stats
	for idx, dst := range map[uint32]*uint64{
		uint32(correlatorStatIndexSTAT_RINGBUF_DROPS):  &s.RingbufDrops,
		uint32(correlatorStatIndexSTAT_LINEAGE_FULL):   &s.LineageFull,
		uint32(correlatorStatIndexSTAT_SCAN_TRUNCATED): &s.ScanTruncated,
		uint32(correlatorStatIndexSTAT_SCAN_ERRORS):    &s.ScanErrors,
		uint32(correlatorStatIndexSTAT_PLACE_ERRORS):   &s.PlaceErrors,
		uint32(correlatorStatIndexSTAT_EXECS_SKIPPED):  &s.ExecsSkipped,
	} {
		var per []uint64
		if err := p.objs.Stats.Lookup(idx, &per); err != nil {
			return s, fmt.Errorf("reading stat %d: %w", idx, err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return s, nil
}

// bootTime is the wall-clock instant the boot-time clock started.
func bootTime() (time.Time, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}, fmt.Errorf("reading CLOCK_BOOTTIME: %w", err)
	}
	return time.Now().Add(-time.Duration(ts.Nano())), nil
}

// ensureBPFFS mounts bpffs at /sys/fs/bpf when the pin path needs it.
func ensureBPFFS(pinPath string) error {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return os.MkdirAll(pinPath, 0o700)
	}
	if err := os.MkdirAll("/sys/fs/bpf", 0o755); err != nil {
		return fmt.Errorf("creating /sys/fs/bpf: %w", err)
	}
	if err := unix.Mount("bpffs", "/sys/fs/bpf", "bpf", 0, ""); err != nil {
		return fmt.Errorf("mounting bpffs at /sys/fs/bpf: %w", err)
	}
	return os.MkdirAll(pinPath, 0o700)
}

// Backlog is the number of bytes waiting in the ring buffer.
func (p *Probe) Backlog() int { return p.reader.AvailableBytes() }
