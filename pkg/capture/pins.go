package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// What a build leaves in bpffs so the kernel keeps watching between agents:
//
//	PinPath/build-<id>/  one build's links (link_exec, link_fork, link_exit:
//	                     the probes run while these exist), the maps the agent
//	                     reads (lineage_map, image_places, events, stats) and
//	                     its heartbeat.
//	PinPath/lineage_map, PinPath/image_places: a build from before build
//	                     directories (maps only; its programs died with it).
//
// The id hashes the BPF object and the settings compiled into the load, so
// a restart of the same build adopts its own directory and anything else is
// a handover (handover.go).
const (
	buildDirPrefix = "build-"
	heartbeatPin   = "heartbeat"
)

// pinnedMaps are the maps a build pins by name (LIBBPF_PIN_BY_NAME in
// maps.h); the scratch maps live as long as the programs that use them.
var pinnedMaps = []string{"lineage_map", "image_places", "events", "stats"}

// buildID names a build and the configuration its programs were loaded with.
func buildID(obj []byte, cfg Config) string {
	h := sha256.New()
	h.Write(obj)
	fmt.Fprintf(h, "\x00keys=%q bridge=%q budget=%d ring=%d lineage=%d wakeup=%d places=%d",
		cfg.Keys, cfg.BridgeKey, cfg.ScanBudget, cfg.RingBufferBytes, cfg.LineageEntries,
		min(cfg.WakeupBytes, cfg.RingBufferBytes/4), cfg.PlaceEntries)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// pinScan is what an agent finds under the pin path at start.
type pinScan struct {
	adopt  bool     // this build's links are all pinned: its probes never stopped
	resume bool     // this build's lineage map is pinned
	old    []string // directories of other builds, oldest first; PinPath itself for legacy pins
}

func scanPins(pinPath, own string, hooks []hook) (pinScan, error) {
	var s pinScan
	s.adopt = true
	for _, h := range hooks {
		if _, err := os.Stat(filepath.Join(own, h.pin)); err != nil {
			s.adopt = false
		}
	}
	_, err := os.Stat(filepath.Join(own, "lineage_map"))
	s.resume = err == nil
	if _, err := os.Stat(filepath.Join(pinPath, "lineage_map")); err == nil {
		s.old = append(s.old, pinPath)
	}
	ents, err := os.ReadDir(pinPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, fmt.Errorf("listing pin path %s: %w", pinPath, err)
	}
	type dated struct {
		dir string
		at  time.Time
	}
	var builds []dated
	for _, de := range ents {
		dir := filepath.Join(pinPath, de.Name())
		if !de.IsDir() || !strings.HasPrefix(de.Name(), buildDirPrefix) || dir == own {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		builds = append(builds, dated{dir, fi.ModTime()})
	}
	for i := range builds { // oldest first: the newest's entries are copied last
		for j := i + 1; j < len(builds); j++ {
			if builds[j].at.Before(builds[i].at) {
				builds[i], builds[j] = builds[j], builds[i]
			}
		}
	}
	for _, b := range builds {
		s.old = append(s.old, b.dir)
	}
	return s, nil
}

// heartbeat is the agent's last sign of life, pinned beside its build.
type heartbeat struct {
	WallNs int64  // time.Now().UnixNano()
	BootNs uint64 // CLOCK_BOOTTIME: the window's length, whatever the wall clock did
	Drops  uint64 // ring drops counted when it was written
	PID    uint32
	_      uint32
}

func heartbeatSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: heartbeatPin, Type: ebpf.Array, KeySize: 4, ValueSize: 32, MaxEntries: 1, Pinning: ebpf.PinByName}
}

// openHeartbeat opens (or creates) dir's heartbeat and returns its last value.
func openHeartbeat(dir string) (*ebpf.Map, heartbeat, error) {
	m, err := ebpf.NewMapWithOptions(heartbeatSpec(), ebpf.MapOptions{PinPath: dir})
	if err != nil {
		return nil, heartbeat{}, fmt.Errorf("opening heartbeat in %s: %w", dir, err)
	}
	var hb heartbeat
	if err := m.Lookup(uint32(0), &hb); err != nil {
		m.Close()
		return nil, heartbeat{}, fmt.Errorf("reading heartbeat in %s: %w", dir, err)
	}
	return m, hb, nil
}

// readHeartbeat reads a pinned heartbeat without creating one.
func readHeartbeat(dir string) (heartbeat, bool) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, heartbeatPin), nil)
	if err != nil {
		return heartbeat{}, false
	}
	defer m.Close()
	var hb heartbeat
	if m.Lookup(uint32(0), &hb) != nil || hb.BootNs == 0 {
		return heartbeat{}, false
	}
	return hb, true
}

// beat records that an agent is reading now.
func (p *Probe) beat() {
	if p.heart == nil {
		return
	}
	s, _ := p.Stats()
	hb := heartbeat{WallNs: time.Now().UnixNano(), BootNs: bootNow(), Drops: s.RingbufDrops, PID: uint32(os.Getpid())}
	if err := p.heart.Update(uint32(0), &hb, ebpf.UpdateAny); err != nil {
		p.log.Warn().Err(err).Msg("writing heartbeat")
	}
}

func bootNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return uint64(ts.Nano())
}

// Removed is what Remove took out of the kernel.
type Removed struct {
	Builds int // build directories (and legacy pin sets) removed
	Links  int // pinned probes detached
}

// Remove detaches every pinned probe under pinPath and removes its pins: the
// uninstall path. A running agent's own links stay attached until it exits.
func Remove(pinPath string) (Removed, error) {
	var r Removed
	if !filepath.IsAbs(pinPath) {
		return r, fmt.Errorf("removing pins in %q: the pin path must be absolute", pinPath)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(pinPath, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return r, nil
		}
		return r, fmt.Errorf("removing pins in %s: %w", pinPath, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return r, fmt.Errorf("removing pins in %s: not a bpf filesystem", pinPath)
	}
	scan, err := scanPins(pinPath, "", nil)
	if err != nil {
		return r, err
	}
	var errs []error
	for _, dir := range scan.old {
		n, err := removeBuild(pinPath, dir)
		r.Links += n
		r.Builds++
		errs = append(errs, err)
	}
	if err := os.Remove(pinPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing pin path %s: %w", pinPath, err))
	}
	return r, errors.Join(errs...)
}

// removeBuild detaches a build's pinned links and removes its pins. The
// legacy pin set lives in pinPath itself: only its known names go.
func removeBuild(pinPath, dir string) (int, error) {
	links, err := detachPinned(dir)
	if dir == pinPath {
		for _, name := range append(pinnedMaps, heartbeatPin) {
			if e := os.Remove(filepath.Join(dir, name)); e != nil && !errors.Is(e, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("removing pin %s: %w", name, e))
			}
		}
		return links, err
	}
	if e := os.RemoveAll(dir); e != nil {
		err = errors.Join(err, fmt.Errorf("removing build pins %s: %w", dir, e))
	}
	return links, err
}

// detachPinned unpins and closes every link pinned in dir: its programs stop
// now (unless an agent still holds them).
func detachPinned(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil
	}
	var errs []error
	n := 0
	for _, de := range ents {
		if !strings.HasPrefix(de.Name(), "link_") {
			continue
		}
		l, err := link.LoadPinnedLink(filepath.Join(dir, de.Name()), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("loading pinned link %s: %w", de.Name(), err))
			continue
		}
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpinning link %s: %w", de.Name(), err))
		}
		errs = append(errs, l.Close())
		n++
	}
	return n, errors.Join(errs...)
}

// loadObjects loads the maps (reusing pinned ones), and the programs unless
// pinned links are adopted.
func (p *Probe) loadObjects(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) error {
	var err error
	if p.adopt {
		err = spec.LoadAndAssign(&p.objs.correlatorMaps, opts)
	} else {
		err = spec.LoadAndAssign(&p.objs, opts)
	}
	if err == nil {
		if m := opts.MapReplacements["image_places"]; m != nil {
			err = pinShared(p.objs.ImagePlaces, filepath.Join(p.dir, "image_places"))
		}
		return err
	}
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		return fmt.Errorf("loading BPF objects: %+v", verr)
	}
	return fmt.Errorf("loading BPF objects into %s: %w", opts.Maps.PinPath, err)
}

// pinShared pins a map taken over from another build under this build's
// directory as well (a second pin; the old one goes with its build).
func pinShared(m *ebpf.Map, path string) error {
	c, err := m.Clone()
	if err != nil {
		return fmt.Errorf("cloning shared map: %w", err)
	}
	defer c.Close()
	if err := c.Pin(path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("pinning shared map %s: %w", path, err)
	}
	return nil
}
