package capture

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// heartbeat is the agent's last sign of life, pinned beside its build.
type heartbeat struct {
	WallNs int64  // time.Now().UnixNano()
	BootNs uint64 // CLOCK_BOOTTIME: the window's length, whatever the wall clock did
	Drops  uint64 // ring drops counted when it was written
	PID    uint32
	// PidNS is the inode of the writer's PID namespace, so a reader in the
	// same one can look PID up. It fills what was padding: builds before it
	// wrote 0 there, and read no further than PID.
	PidNS uint32
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
	hb := heartbeat{WallNs: time.Now().UnixNano(), BootNs: bootNow(), Drops: s.RingbufDrops,
		PID: uint32(os.Getpid()), PidNS: p.pidNS}
	if err := p.heart.Update(uint32(0), &hb, ebpf.UpdateAny); err != nil {
		p.log.Warn().Err(err).Msg("writing heartbeat")
	}
}

func bootNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return uint64(ts.Nano())
}

// liveAfter: a heartbeat this recent says a process is reading the pinned
// probes now; a reading agent beats every heartbeatEvery. It decides only
// where the writer cannot be looked up (writerUnknown).
const liveAfter = 30 * time.Second

// Reader is a process reading probes pinned under a pin path.
type Reader struct {
	PID   uint32        // as its heartbeat gives it
	Dir   string        // its build's pin directory
	Since time.Duration // since its last heartbeat
	// Seen: the process was found running, in this PID namespace. Otherwise
	// only its heartbeat's age says it may be, for Unseen's reason, and Wait
	// is how long until its pins count as left.
	Seen   bool
	Unseen string
	Wait   time.Duration
}

// LiveReader reports the process (an agent, or a pinning capture) reading
// probes pinned under pinPath now: the freshest heartbeat of any build
// there, written within liveAfter by another process than this one, that
// is not known to be gone. Loading with that pin path would share its ring
// (the same build) or take its probes over and remove its pins (another
// build, handover.go).
func LiveReader(pinPath string) (Reader, bool) {
	scan, err := scanPins(pinPath, "", nil)
	if err != nil {
		return Reader{}, false
	}
	var beats []pinnedBeat
	for _, dir := range scan.old {
		if hb, ok := readHeartbeat(dir); ok {
			beats = append(beats, pinnedBeat{dir, hb})
		}
	}
	return liveReader(beats, bootNow(), procfsView{root: "/proc"})
}

// pinnedBeat is a build directory's heartbeat.
type pinnedBeat struct {
	dir string
	hb  heartbeat
}

// liveReader is LiveReader's decision: a writer seen running beats one that
// may be, then the freshest heartbeat wins.
func liveReader(beats []pinnedBeat, now uint64, v procView) (Reader, bool) {
	self, selfOK := v.pidNS()
	var (
		best  Reader
		found bool
	)
	for _, b := range beats {
		hb := b.hb
		// This process's own, unless its namespace says another wrote it.
		if hb.BootNs > now || (hb.PID == uint32(os.Getpid()) && (hb.PidNS == 0 || !selfOK || hb.PidNS == self)) {
			continue
		}
		since := time.Duration(now - hb.BootNs)
		state, why := writerState(hb, v)
		if state == writerGone || since > liveAfter {
			continue
		}
		r := Reader{PID: hb.PID, Dir: b.dir, Since: since, Seen: state == writerRunning}
		if !r.Seen {
			r.Unseen, r.Wait = why, liveAfter-since
		}
		if !found || (r.Seen && !best.Seen) || (r.Seen == best.Seen && since < best.Since) {
			best, found = r, true
		}
	}
	return best, found
}

// writer is what can be known of a heartbeat's writer from here.
type writer int

const (
	writerUnknown writer = iota // not visible from here: the heartbeat's age decides
	writerRunning               // found running: it is reading now
	writerGone                  // exited, or its PID is another process's now
)

// procView is this process's view of others: its PID namespace and /proc.
type procView interface {
	// pidNS is the inode of this process's PID namespace, if /proc is that
	// namespace's (else its PIDs are another namespace's).
	pidNS() (uint32, bool)
	// process reads pid's state and start (CLOCK_BOOTTIME, /proc's 10ms
	// resolution, rounded down); an error wrapping os.ErrNotExist if no
	// such process.
	process(pid uint32) (procState, error)
}

type procState struct {
	startNs uint64
	zombie  bool // exited, not yet reaped: its BPF descriptors are closed
}

// writerState looks the heartbeat's writer up where its PID means the same
// process as here: the same PID namespace. A process at that PID that
// started after the heartbeat was written took a dead writer's PID.
func writerState(hb heartbeat, v procView) (writer, string) {
	if hb.PidNS == 0 {
		return writerUnknown, "its heartbeat does not say its PID namespace (an older correlator wrote it)"
	}
	self, ok := v.pidNS()
	if !ok {
		return writerUnknown, "this process's PID namespace cannot be read from /proc"
	}
	if self != hb.PidNS {
		return writerUnknown, "it runs in another PID namespace (a pod without hostPID?)"
	}
	st, err := v.process(hb.PID)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return writerGone, ""
	case err != nil:
		return writerUnknown, fmt.Sprintf("its /proc entry cannot be read (%v)", err)
	case st.zombie || st.startNs > hb.BootNs:
		return writerGone, ""
	}
	return writerRunning, ""
}

// procfsView reads /proc (this process's, not --proc-root: the writer's PID
// is in the namespace it recorded, checked to be this one).
type procfsView struct{ root string }

// ownPIDNamespace is the inode of this process's PID namespace, 0 when
// /proc cannot say (a heartbeat then says nothing of it).
func ownPIDNamespace(root string) uint32 {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "self/ns/pid"), &st); err != nil || st.Ino > math.MaxUint32 {
		return 0
	}
	return uint32(st.Ino)
}

func (v procfsView) pidNS() (uint32, bool) {
	self, err := os.Readlink(filepath.Join(v.root, "self"))
	if err != nil || self != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	ns := ownPIDNamespace(v.root)
	return ns, ns != 0
}

func (v procfsView) process(pid uint32) (procState, error) {
	b, err := os.ReadFile(filepath.Join(v.root, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return procState{}, err
	}
	_, start, err := parseStat(b)
	if err != nil {
		return procState{}, err
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:]) // parseStat checked there are enough
	return procState{startNs: start * ticksNs, zombie: f[0][0] == 'Z' || f[0][0] == 'X'}, nil
}
