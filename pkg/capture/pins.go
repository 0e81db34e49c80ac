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

// preparePins readies the pin path for this build: the directory, and what
// is pinned there already (scanPins: its own probes to adopt, other builds
// to take over). What it creates is recorded in p.made.
func (p *Probe) preparePins(b build) (pinScan, error) {
	made, err := preparePinPath(p.cfg.PinPath)
	p.made.dirs = made
	if err != nil {
		return pinScan{}, err
	}
	p.dir = filepath.Join(p.cfg.PinPath, buildDirPrefix+buildID(b.obj, p.cfg))
	scan, err := scanPins(p.cfg.PinPath, p.dir, p.hooks())
	if err != nil {
		return scan, err
	}
	p.adopt, p.old = scan.adopt, scan.old
	p.resumed = scan.resume || len(scan.old) > 0
	if _, err := os.Stat(p.dir); errors.Is(err, os.ErrNotExist) {
		p.made.build = true
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return scan, fmt.Errorf("creating pin directory %s: %w", p.dir, err)
	}
	return scan, nil
}

// bpffsRoot is where bpffs is mounted by convention, and mounted by Load
// when a pin path under it needs it.
const bpffsRoot = "/sys/fs/bpf"

// preparePinPath checks that pinPath lies on a bpf filesystem, mounting
// bpffs at bpffsRoot when the pin path is under it and nothing is mounted
// there, and creates it. It returns the directories it created, outermost
// first. A pin path elsewhere than on bpffs is refused before anything is
// created: pinning there would fail half-way through the load.
func preparePinPath(pinPath string) ([]string, error) {
	var missing []string // innermost first
	have := pinPath
	for {
		_, err := os.Stat(have)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || have == "/" {
			return nil, fmt.Errorf("checking pin path %s: %w", pinPath, err)
		}
		missing = append(missing, have)
		have = filepath.Dir(have)
	}
	if !onBPFFS(have) {
		under := pinPath == bpffsRoot || strings.HasPrefix(pinPath, bpffsRoot+"/")
		if !under {
			return nil, fmt.Errorf("checking pin path %s: %s is not on a bpf filesystem: mount bpffs there, or give a pin path under %s", pinPath, have, bpffsRoot)
		}
		if err := mountBPFFS(); err != nil {
			return nil, err
		}
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		err := os.Mkdir(missing[i], 0o700)
		if err != nil && !errors.Is(err, os.ErrExist) {
			return made, fmt.Errorf("creating pin path %s: %w", missing[i], err)
		}
		if err == nil {
			made = append(made, missing[i])
		}
	}
	return made, nil
}

func onBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// mountBPFFS mounts bpffs at bpffsRoot, unless one is mounted already.
func mountBPFFS() error {
	if onBPFFS(bpffsRoot) {
		return nil
	}
	if err := os.MkdirAll(bpffsRoot, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", bpffsRoot, err)
	}
	if err := unix.Mount("bpffs", bpffsRoot, "bpf", 0, ""); err != nil {
		return fmt.Errorf("mounting bpffs at %s: %w", bpffsRoot, err)
	}
	return nil
}

// madePins is what a start created under the pin path: directories up to
// the pin path, and this build's directory with all it pinned there.
type madePins struct {
	dirs  []string // outermost first
	build bool
}

// Discard closes a probe whose start failed. Until its probes attach, the
// pins its Load made are this start's alone, and go with it: a failed first
// start leaves nothing in the kernel. What it found pinned (probes an
// earlier agent left watching, other builds) stays for the next start.
// Once attached, Discard is Close: the pins outlive the process.
func (p *Probe) Discard() error {
	errs := []error{p.Close()}
	if p.made.build {
		_, err := removeBuild(p.cfg.PinPath, p.dir)
		errs = append(errs, err)
	}
	for i := len(p.made.dirs) - 1; i >= 0; i-- {
		if os.Remove(p.made.dirs[i]) != nil {
			break // not empty: someone pinned there meanwhile
		}
	}
	p.made = madePins{}
	return errors.Join(errs...)
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
