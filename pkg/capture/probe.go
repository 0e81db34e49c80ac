package capture

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Probe owns the loaded BPF objects, their links and the ring-buffer reader.
type Probe struct {
	cfg         Config
	log         zerolog.Logger
	objs        correlatorObjects
	dec         *Decoder
	ring        *ringView // the events ring, read by Run (read.go)
	mu          sync.Mutex
	links       []link.Link
	resumed     bool          // pinned lineage was found: a restart or a handover
	dir         string        // this build's pin directory; empty when not pinning
	adopt       bool          // this build's probes were still pinned: adopt, do not attach
	old         []string      // other builds to take over from (handover.go)
	lineageType btf.Type      // this build's struct lineage, for the handover copy
	heart       *ebpf.Map     // pinned heartbeat
	lastBeat    time.Time     // when Run last wrote it
	window      Window        // what the start found about the time nobody read
	handed      HandoverStats // what the start took over
	pending     []Event       // drained from old rings, delivered first by Run
	badOld      int           // old frames that did not decode
	procfsRoots atomic.Int64  // roots Bootstrap found only through procfs
	object      string        // the BPF object loaded (object.go)
	pidNS       uint32        // this process's PID namespace, in the heartbeat
	made        madePins      // what this start pinned itself, until it attaches
}

// hook pairs a program with the tracepoint named in errors and its link pin.
type hook struct {
	name string
	pin  string
	prog *ebpf.Program
}

func (p *Probe) hooks() []hook {
	return []hook{
		{"tp_btf/sched_process_exec", "link_exec", p.objs.HandleExec},
		{"tp_btf/sched_process_fork", "link_fork", p.objs.HandleFork},
		{"tp_btf/sched_process_exit", "link_exit", p.objs.HandleExit},
	}
}

// Load loads the programs with cfg's keys and budget, from the object
// cfg.Object names (object.go: by default the kernel is probed). With a pin
// path it adopts this build's pinned probes and maps when they exist (a
// restart: the probes never stopped), and otherwise prepares to take over
// from any other build pinned there (an upgrade or rollback: see Attach). It
// does not attach.
func Load(cfg Config, log zerolog.Logger) (*Probe, error) {
	return kernelSteps().run(cfg, log)
}

// loadSteps are Load's steps against the kernel, in the order run takes
// them. Load runs the real ones (kernelSteps); a test passes its own to
// check the order.
type loadSteps struct {
	preflight     func() error
	removeMemlock func() error
	choose        func(Object) (build, error)
	load          func(Config, zerolog.Logger, build) (*Probe, error)
}

func kernelSteps() loadSteps {
	return loadSteps{preflight: Preflight, removeMemlock: rlimit.RemoveMemlock, choose: chooseBuild, load: load}
}

func (s loadSteps) run(cfg Config, log zerolog.Logger) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := s.preflight(); err != nil {
		return nil, err
	}
	// Before anything touches BPF, the feature probes of chooseBuild
	// included: before 5.11 every map and program is charged to
	// RLIMIT_MEMLOCK, against the user's locked memory (an agent's maps
	// count against a later capture's limit): at the distributions' 64 KiB
	// default, beside an agent, even the first probe's one-entry array is
	// refused. Since 5.11 the memory cgroup is charged instead, and this
	// does nothing.
	if err := s.removeMemlock(); err != nil {
		return nil, fmt.Errorf("removing memlock rlimit: %w", err)
	}
	b, err := s.choose(cfg.Object)
	if err != nil {
		return nil, err
	}
	return s.load(cfg, log, b)
}

func load(cfg Config, log zerolog.Logger, b build) (_ *Probe, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("removing memlock rlimit: %w", err)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(b.obj))
	if err != nil {
		return nil, fmt.Errorf("loading BPF spec %s: %w", b.name, err)
	}
	if err := configureSpec(spec, cfg); err != nil {
		return nil, err
	}
	p := &Probe{cfg: cfg, log: log.With().Str("component", "capture").Str("object", b.name).Logger(), lineageType: spec.Maps["lineage_map"].Value,
		object: b.name, pidNS: ownPIDNamespace("/proc")}
	// A failed load leaves no pins of its own (Discard).
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Discard())
		}
	}()
	opts := &ebpf.CollectionOptions{}
	if cfg.PinPath != "" {
		scan, err := p.preparePins(b)
		if err != nil {
			return nil, err
		}
		opts.Maps.PinPath = p.dir
		if !p.adopt && !scan.resume {
			if m := sharedPlaces(spec, scan.old); m != nil {
				defer m.Close()
				opts.MapReplacements = map[string]*ebpf.Map{"image_places": m}
			}
		}
	} else {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	if err := p.loadObjects(spec, opts); err != nil {
		return nil, err
	}
	if p.ring, err = newRingView(p.objs.Events); err != nil {
		return nil, fmt.Errorf("opening ring buffer: %w", err)
	}
	boot, err := bootTime()
	if err != nil {
		return nil, err
	}
	p.dec = NewDecoder(cfg.Keys, boot)
	if p.dir != "" {
		var last heartbeat
		if p.heart, last, err = openHeartbeat(p.dir); err != nil {
			return nil, err
		}
		if p.adopt && last.BootNs != 0 {
			s, _ := p.Stats()
			p.noteWindow(last, s.RingbufDrops, "adopting this build's pinned probes")
		}
	}
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
	if m := spec.Maps["image_places"]; m.Type == ebpf.Hash {
		m.MaxEntries = cfg.PlaceEntries // the compat object's (maps.h)
	}
	spec.Maps["events"].MaxEntries = cfg.RingBufferBytes
	return nil
}

// Object names the BPF object loaded: "correlator" (the default object) or
// "correlator-compat" (object.go).
func (p *Probe) Object() string { return p.object }

// Resumed reports whether Load found pinned lineage from an earlier run.
func (p *Probe) Resumed() bool { return p.resumed }

// Decoder returns the probe's decoder.
func (p *Probe) Decoder() *Decoder { return p.dec }

// Attach attaches exec, fork and exit, in that order; on error it detaches
// what it attached. Pinned, each link is pinned as it attaches, and links
// this build left pinned are adopted instead: the probes never stopped.
// When another build is pinned beside this one, its lineage is copied in
// first, and once this build's probes run, the old ones are detached and
// their pins removed (handover.go).
func (p *Probe) Attach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.links) > 0 {
		return nil
	}
	p.handoverCopy()
	for _, h := range p.hooks() {
		l, err := p.attachOne(h)
		if err != nil {
			p.detachLocked()
			return err
		}
		p.links = append(p.links, l)
	}
	if len(p.old) > 0 {
		p.handoverFinish()
	}
	// Attached, the pins are the kernel's watching state: they outlive this
	// process, whatever becomes of it.
	p.made = madePins{}
	p.beat()
	return nil
}

func (p *Probe) attachOne(h hook) (link.Link, error) {
	if p.dir == "" {
		l, err := link.AttachTracing(link.TracingOptions{Program: h.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return nil, fmt.Errorf("attaching %s: %w", h.name, err)
		}
		return l, nil
	}
	path := filepath.Join(p.dir, h.pin)
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		return l, nil
	} else if h.prog == nil {
		return nil, fmt.Errorf("adopting pinned %s: %w", h.name, err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: h.prog, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		return nil, fmt.Errorf("attaching %s: %w", h.name, err)
	}
	if err := l.Pin(path); err != nil {
		l.Close()
		return nil, fmt.Errorf("pinning %s: %w", h.name, err)
	}
	return l, nil
}

// Detach stops the probes: it unpins the links and closes them in reverse
// order. Pinned maps stay.
func (p *Probe) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detachLocked()
}

func (p *Probe) detachLocked() error {
	var errs []error
	for i := len(p.links) - 1; i >= 0; i-- {
		if p.dir != "" {
			if err := p.links[i].Unpin(); err != nil {
				errs = append(errs, fmt.Errorf("unpinning link %d: %w", i, err))
			}
		}
	}
	return errors.Join(append(errs, p.closeLinksLocked())...)
}

// closeLinksLocked closes the links' descriptors; pinned links stay attached.
func (p *Probe) closeLinksLocked() error {
	var errs []error
	for i := len(p.links) - 1; i >= 0; i-- {
		if err := p.links[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing link %d: %w", i, err))
		}
	}
	p.links = nil
	return errors.Join(errs...)
}

// Close closes the links, the reader and the objects (cancel, wait, links,
// objects). What is pinned stays: the probes keep running unread, and the
// next agent adopts them. Call Unpin first to stop them for good.
func (p *Probe) Close() error {
	p.mu.Lock()
	errs := []error{p.closeLinksLocked()}
	p.mu.Unlock()
	if p.ring != nil {
		errs = append(errs, p.ring.Close())
	}
	if p.heart != nil {
		errs = append(errs, p.heart.Close())
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// Unpin removes this build's pins, so Close detaches the probes.
func (p *Probe) Unpin() error {
	if p.dir == "" {
		return nil
	}
	_, err := removeBuild(p.cfg.PinPath, p.dir)
	return err
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

// Backlog is the number of bytes waiting in the ring buffer.
func (p *Probe) Backlog() int { return p.ring.available() }
