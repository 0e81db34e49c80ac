package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/capture"
)

// What a command leaves in the kernel, checked from outside: the links,
// programs and maps its process held (by /proc/<pid>/fdinfo; BPF object IDs
// are global, so other tests' objects never count) and everything under a
// private bpffs at /sys/fs/bpf (testutil.PrivateBPFFS), which is all it
// could have pinned.

// kernelObjects are the BPF objects a process holds open.
type kernelObjects struct {
	links, progs, maps []uint32
}

// heldObjects reads the BPF objects pid holds from its fdinfo.
func heldObjects(t *testing.T, pid int) kernelObjects {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	var o kernelObjects
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if !ok || err != nil {
				continue
			}
			switch k {
			case "link_id":
				o.links = append(o.links, uint32(n))
			case "prog_id":
				o.progs = append(o.progs, uint32(n))
			case "map_id":
				o.maps = append(o.maps, uint32(n))
			}
		}
	}
	slices.Sort(o.progs)
	o.progs = slices.Compact(o.progs) // a link's fdinfo names its program too
	return o
}

// alive returns the objects of o that still exist in the kernel.
func (o kernelObjects) alive() kernelObjects {
	var a kernelObjects
	for _, id := range o.links {
		if l, err := link.NewFromID(link.ID(id)); err == nil {
			l.Close()
			a.links = append(a.links, id)
		}
	}
	for _, id := range o.progs {
		if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
			p.Close()
			a.progs = append(a.progs, id)
		}
	}
	for _, id := range o.maps {
		if m, err := ebpf.NewMapFromID(ebpf.MapID(id)); err == nil {
			m.Close()
			a.maps = append(a.maps, id)
		}
	}
	return a
}

func (o kernelObjects) empty() bool { return len(o.links)+len(o.progs)+len(o.maps) == 0 }

// bpffsEntries lists everything under /sys/fs/bpf as this goroutine sees
// it, less what a fresh bpffs holds (the kernel's preloaded
// maps.debug and progs.debug iterators).
func bpffsEntries(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(testutil.BPFFSPath, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path, testutil.BPFFSPath+"/")
		if path != testutil.BPFFSPath && !preloaded[rel] {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing %s: %v", testutil.BPFFSPath, err)
	}
	return out
}

// preloaded are the iterators every bpffs mount shows (CONFIG_BPF_PRELOAD).
var preloaded = map[string]bool{"maps.debug": true, "progs.debug": true}

// started is a correlator command running in the test's namespace.
type started struct {
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	exited chan struct{} // closed once err holds Wait's answer
	err    error
}

// startCommand runs bin with args and waits until its log says msg.
func startCommand(t *testing.T, bin, msg string, args ...string) *started {
	t.Helper()
	s := &started{cmd: exec.Command(bin, args...), stderr: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	s.cmd.Stdout = io.Discard
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil { // forks from this goroutine's thread: its namespace
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { s.cmd.Process.Kill(); <-s.exited })
	testutil.EventuallyNil(t, func() error {
		if strings.Contains(s.stderr.String(), `"message":"`+msg) {
			return nil
		}
		select {
		case <-s.exited:
			t.Fatalf("%v exited (%v) before logging %q:\n%s", args, s.err, msg, s.stderr)
		default:
		}
		return fmt.Errorf("%v has not logged %q:\n%s", args, msg, s.stderr)
	})
	return s
}

// stop signals the command and waits for a clean exit.
func (s *started) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	if s.err != nil {
		t.Fatalf("%v exited with %v after %v:\n%s", s.cmd.Args[1:], s.err, sig, s.stderr)
	}
}

// TestCaptureLeavesNothingInKernel: `correlator capture`, interrupted,
// leaves no link, program, map or pin of its own in the kernel. The
// control: with --pin its probes stay attached and pinned after it exits,
// until `correlator uninstall` removes them.
func TestCaptureLeavesNothingInKernel(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildBinary(t)

	t.Run("default", func(t *testing.T) {
		testutil.PrivateBPFFS(t)
		c := startCommand(t, bin, "capturing", "capture", "--with-id-only")
		held := heldObjects(t, c.cmd.Process.Pid)
		if len(held.links) != 3 || len(held.progs) < 3 || len(held.maps) == 0 {
			t.Fatalf("capture holds %+v, want its 3 links, their programs and its maps", held)
		}
		if !strings.Contains(c.stderr.String(), "probes not pinned") {
			t.Errorf("capture did not say its probes are not pinned:\n%s", c.stderr)
		}
		if got := bpffsEntries(t); len(got) != 0 {
			t.Errorf("capture pinned %v while running", got)
		}
		c.stop(t, os.Interrupt)
		testutil.EventuallyNil(t, func() error {
			if a := held.alive(); !a.empty() {
				return fmt.Errorf("left in the kernel after SIGINT: links %v programs %v maps %v", a.links, a.progs, a.maps)
			}
			return nil
		})
		if got := bpffsEntries(t); len(got) != 0 {
			t.Errorf("left under %s after SIGINT: %v", testutil.BPFFSPath, got)
		}
	})

	t.Run("control: --pin leaves its probes until uninstall", func(t *testing.T) {
		testutil.PrivateBPFFS(t)
		c := startCommand(t, bin, "capturing", "capture", "--with-id-only", "--pin")
		held := heldObjects(t, c.cmd.Process.Pid)
		if !strings.Contains(c.stderr.String(), "probes pinned") {
			t.Errorf("capture --pin did not say it pins:\n%s", c.stderr)
		}
		c.stop(t, os.Interrupt)
		a := held.alive()
		if !slices.Equal(a.links, held.links) || len(a.progs) < 3 {
			t.Errorf("after capture --pin exited, links %v of %v and programs %v are attached; want all", a.links, held.links, a.progs)
		}
		links, _ := filepath.Glob(filepath.Join(capture.DefaultPinPath, "build-*", "link_*"))
		if len(links) != 3 {
			t.Errorf("pinned links %v, want 3 (%v)", links, bpffsEntries(t))
		}
		if out, err := exec.Command(bin, "uninstall").CombinedOutput(); err != nil {
			t.Fatalf("uninstall: %v\n%s", err, out)
		}
		testutil.EventuallyNil(t, func() error {
			if a := held.alive(); !a.empty() {
				return fmt.Errorf("left after uninstall: links %v programs %v maps %v", a.links, a.progs, a.maps)
			}
			return nil
		})
		if got := bpffsEntries(t); len(got) != 0 {
			t.Errorf("left under %s after uninstall: %v", testutil.BPFFSPath, got)
		}
	})
}

// TestCaptureBesideAgent: with `correlator run` reading probes pinned at
// the default path, `capture` runs its own unpinned probes and leaves the
// agent's pins and links as they were; `capture --pin` there is refused,
// naming the agent. The agent, stopped, leaves its probes pinned (that is
// its point) until `correlator uninstall`.
func TestCaptureBesideAgent(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildBinary(t)
	testutil.PrivateBPFFS(t)
	dir := t.TempDir()
	agent := startCommand(t, bin, "correlator running", "run", "--insecure-no-auth", "--listen", "127.0.0.1:0",
		"--store", "sqlite:"+filepath.Join(dir, "c.db"), "--log-level", "info")
	if !strings.Contains(agent.stderr.String(), "probes pinned") {
		t.Errorf("the agent did not say it pins:\n%s", agent.stderr)
	}
	testutil.Eventually(t, "the agent's heartbeat", func() bool {
		r, ok := capture.LiveReader(capture.DefaultPinPath)
		return ok && r.PID == uint32(agent.cmd.Process.Pid)
	})
	pins := bpffsEntries(t)
	agentHeld := heldObjects(t, agent.cmd.Process.Pid)
	if len(agentHeld.links) != 3 || !slices.ContainsFunc(pins, func(p string) bool { return strings.HasSuffix(p, "/link_exec") }) {
		t.Fatalf("agent holds %+v, pinned %v: want 3 pinned links", agentHeld, pins)
	}
	agentIntact := func(when string) {
		t.Helper()
		if got := bpffsEntries(t); !slices.Equal(got, pins) {
			t.Errorf("%s: pins %v, want the agent's %v", when, got, pins)
		}
		if a := agentHeld.alive(); !slices.Equal(a.links, agentHeld.links) {
			t.Errorf("%s: the agent's links %v, want %v attached", when, a.links, agentHeld.links)
		}
	}

	// Its own probes, beside the agent's; gone when it exits.
	c := startCommand(t, bin, "capturing", "capture", "--with-id-only")
	held := heldObjects(t, c.cmd.Process.Pid)
	if len(held.links) != 3 || slices.ContainsFunc(held.links, func(id uint32) bool { return slices.Contains(agentHeld.links, id) }) {
		t.Fatalf("capture holds links %v, want 3 of its own (the agent's: %v)", held.links, agentHeld.links)
	}
	agentIntact("while capture runs")
	c.stop(t, os.Interrupt)
	testutil.EventuallyNil(t, func() error {
		if a := held.alive(); !a.empty() {
			return fmt.Errorf("capture left links %v programs %v maps %v", a.links, a.progs, a.maps)
		}
		return nil
	})
	agentIntact("after capture exited")

	// --pin where the agent reads: refused, nothing touched.
	out, err := exec.Command(bin, "capture", "--pin").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "process "+strconv.Itoa(agent.cmd.Process.Pid)) ||
		!strings.Contains(string(out), "without --pin") {
		t.Errorf("capture --pin beside the agent: %v\n%s\nwant a refusal naming the agent and what to do", err, out)
	}
	agentIntact("after capture --pin was refused")

	// The agent's probes outlive it, pinned, until uninstall.
	agent.stop(t, syscall.SIGTERM)
	agentIntact("after the agent stopped")
	if out, err := exec.Command(bin, "uninstall").CombinedOutput(); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	testutil.EventuallyNil(t, func() error {
		if a := agentHeld.alive(); len(a.links)+len(a.progs) > 0 {
			return fmt.Errorf("left after uninstall: links %v programs %v", a.links, a.progs)
		}
		return nil
	})
	if got := bpffsEntries(t); len(got) != 0 {
		t.Errorf("left under %s after uninstall: %v", testutil.BPFFSPath, got)
	}
}
