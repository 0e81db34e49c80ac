package capture

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
)

// fakeProcs is a procView: this process's PID namespace and the processes
// it can look up.
type fakeProcs struct {
	ns    uint32
	nsOK  bool
	procs map[uint32]procState
}

func (f fakeProcs) pidNS() (uint32, bool) { return f.ns, f.nsOK }

func (f fakeProcs) process(pid uint32) (procState, error) {
	st, ok := f.procs[pid]
	if !ok {
		return procState{}, fmt.Errorf("reading /proc/%d/stat: %w", pid, os.ErrNotExist)
	}
	return st, nil
}

// TestLiveReaderDecision: where the heartbeat's writer can be looked up (the
// same PID namespace), a running one holds its pins and a gone one (exited,
// a zombie, or its PID taken by a later process) leaves them at once; where
// it cannot (another namespace, an older heartbeat), the heartbeat's age
// decides and the refusal says how long is left.
func TestLiveReaderDecision(t *testing.T) {
	const (
		ns  = 4026531836
		pid = 4242
		now = uint64(2 * time.Hour)
	)
	beat := func(ago time.Duration, ns uint32) heartbeat {
		return heartbeat{BootNs: now - uint64(ago), PID: pid, PidNS: ns}
	}
	started := now - uint64(time.Hour)
	running := map[uint32]procState{pid: {startNs: started}}
	for _, tc := range []struct {
		name   string
		hb     heartbeat
		procs  fakeProcs
		live   bool
		seen   bool
		wait   time.Duration
		unseen string
	}{
		{"same namespace, running since before its heartbeat", beat(2*time.Second, ns),
			fakeProcs{ns, true, running}, true, true, 0, ""},
		{"same namespace, exited", beat(2*time.Second, ns),
			fakeProcs{ns, true, nil}, false, false, 0, ""},
		{"same namespace, a zombie", beat(2*time.Second, ns),
			fakeProcs{ns, true, map[uint32]procState{pid: {startNs: started, zombie: true}}}, false, false, 0, ""},
		{"same namespace, PID reused by a process started after the heartbeat", beat(2*time.Second, ns),
			fakeProcs{ns, true, map[uint32]procState{pid: {startNs: now - uint64(time.Second)}}}, false, false, 0, ""},
		{"same namespace, running but silent past liveAfter", beat(liveAfter+time.Second, ns),
			fakeProcs{ns, true, running}, false, false, 0, ""},
		{"another namespace, fresh: the time rule", beat(2*time.Second, ns+1),
			fakeProcs{ns, true, nil}, true, false, liveAfter - 2*time.Second, "another PID namespace"},
		{"another namespace, stale", beat(liveAfter+time.Second, ns+1),
			fakeProcs{ns, true, nil}, false, false, 0, ""},
		{"an older heartbeat without its namespace, fresh", beat(5*time.Second, 0),
			fakeProcs{ns, true, nil}, true, false, liveAfter - 5*time.Second, "older correlator"},
		{"this process's namespace unknown", beat(2*time.Second, ns),
			fakeProcs{0, false, running}, true, false, liveAfter - 2*time.Second, "cannot be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := liveReader([]pinnedBeat{{"/pins/build-x", tc.hb}}, now, tc.procs)
			if ok != tc.live {
				t.Fatalf("live %v (%+v), want %v", ok, r, tc.live)
			}
			if !ok {
				return
			}
			if r.PID != pid || r.Dir != "/pins/build-x" || r.Seen != tc.seen || r.Wait != tc.wait || !strings.Contains(r.Unseen, tc.unseen) {
				t.Errorf("reader %+v, want seen %v wait %s unseen ~%q", r, tc.seen, tc.wait, tc.unseen)
			}
		})
	}
}

// TestLiveReaderPrefersSeen: of two heartbeats, one whose writer is seen
// running wins over a fresher one that cannot be checked; this process's own
// is never a reader.
func TestLiveReaderPrefersSeen(t *testing.T) {
	const ns, now = 7, uint64(time.Hour)
	procs := fakeProcs{ns, true, map[uint32]procState{10: {startNs: 1}}}
	beats := []pinnedBeat{
		{"/p/build-other-ns", heartbeat{BootNs: now - uint64(time.Second), PID: 20, PidNS: ns + 1}},
		{"/p/build-seen", heartbeat{BootNs: now - uint64(3*time.Second), PID: 10, PidNS: ns}},
		{"/p/build-self", heartbeat{BootNs: now, PID: uint32(os.Getpid()), PidNS: ns}},
	}
	r, ok := liveReader(beats, now, procs)
	if !ok || r.Dir != "/p/build-seen" || !r.Seen {
		t.Errorf("reader %+v %v, want the seen one", r, ok)
	}
	if r, ok := liveReader(beats[2:], now, procs); ok {
		t.Errorf("this process's own heartbeat is a reader: %+v", r)
	}
}

// TestPinsInUseMessage: a refusal names the process and what to do; where
// the process could not be checked, also why and how long to wait.
func TestPinsInUseMessage(t *testing.T) {
	seen := pinsInUse(Reader{PID: 42, Dir: "/p/build-x", Since: time.Second, Seen: true}, "/p").Error()
	unseen := pinsInUse(Reader{PID: 42, Dir: "/p/build-x", Since: 2 * time.Second,
		Unseen: "it runs in another PID namespace", Wait: 27*time.Second + time.Millisecond}, "/p").Error()
	for _, want := range []string{"process 42", "/p/build-x", "without --pin", "another --pin-path"} {
		if !strings.Contains(seen, want) || !strings.Contains(unseen, want) {
			t.Errorf("refusals lack %q:\n%s\n%s", want, seen, unseen)
		}
	}
	for _, want := range []string{"another PID namespace", "accepted in 28s", "correlator uninstall --pin-path /p"} {
		if !strings.Contains(unseen, want) {
			t.Errorf("refusal of an unchecked reader lacks %q:\n%s", want, unseen)
		}
	}
	if strings.Contains(seen, "accepted in") {
		t.Errorf("refusal of a running reader offers a wait:\n%s", seen)
	}
}

// TestProcfsView: the real /proc gives this process's namespace and start,
// a zombie as such, and a reaped process as gone.
func TestProcfsView(t *testing.T) {
	v := procfsView{root: "/proc"}
	ns, ok := v.pidNS()
	if !ok || ns == 0 || ns != ownPIDNamespace("/proc") {
		t.Fatalf("pidNS %d %v, want this process's (%d)", ns, ok, ownPIDNamespace("/proc"))
	}
	self, err := v.process(uint32(os.Getpid()))
	if err != nil || self.zombie || self.startNs == 0 || self.startNs > bootNow() {
		t.Fatalf("this process: %+v %v, want running, started before now", self, err)
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the killed child is a zombie", func() bool {
		st, err := v.process(pid)
		return err == nil && st.zombie
	})
	_ = cmd.Wait()
	if _, err := v.process(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reaped child: %v, want not found", err)
	}
	if st, why := writerState(heartbeat{BootNs: bootNow(), PID: pid, PidNS: ns}, v); st != writerGone && st != writerRunning {
		t.Errorf("a reaped writer in this namespace: %v (%s), want it looked up", st, why)
	}
}
