package capture

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/execid/correlator/internal/testutil"
)

// agentSide runs a whole `correlator run` for each attached batch of
// BenchmarkExecOverhead: probes, decoder, joiner and a temporary SQLite
// store, with no audit source and the API on a loopback port.
//
// CORRELATOR_BENCH_PPROF=127.0.0.1:6060 has the agent serve pprof there.
type agentSide struct {
	bin, dir string
	addr     string // the API's, once attached
	cmd      *exec.Cmd
	progs    [3]*ebpf.Program
}

func newAgentSide(b *testing.B, bin string) *agentSide {
	b.Helper()
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("CORRELATOR_BENCH_AGENT: %v", err)
	}
	return &agentSide{bin: bin, dir: b.TempDir()}
}

func (s *agentSide) attach(b *testing.B) [3]*ebpf.Program {
	b.Helper()
	db := filepath.Join(s.dir, "correlator.db")
	os.Remove(db)
	s.cmd = exec.Command(s.bin, "run", "--no-pin", "--insecure-no-auth", "--listen", "127.0.0.1:0",
		"--store", "sqlite:"+db, "--log-level", "info")
	if addr := os.Getenv("CORRELATOR_BENCH_PPROF"); addr != "" {
		s.cmd.Args = append(s.cmd.Args, "--pprof-listen", addr)
	}
	s.cmd.Stdout = io.Discard
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		b.Fatalf("starting %s: %v", s.bin, err)
	}
	// Ready once it logs that it runs: the probes are attached by then.
	ready := make(chan string, 1) // the API's address, "" if it never ran
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			var line struct{ Message, Listen string }
			if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "correlator running" {
				ready <- line.Listen
				sent = true
			}
		}
		if !sent {
			ready <- ""
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case addr := <-ready:
		if addr == "" {
			s.cmd.Wait()
			b.Fatalf("%s run exited before it was running", s.bin)
		}
		s.addr = addr
		// Its start-up work (procfs bootstrap, store schema) is done
		// once it reports ready.
		testutil.Eventually(b, "the agent ready", func() bool {
			res, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		s.cmd.Wait()
		b.Fatalf("%s run did not start in 30s", s.bin)
	}
	s.progs = agentPrograms(b, s.cmd.Process.Pid)
	return s.progs
}

func (s *agentSide) detach(b *testing.B) {
	b.Helper()
	for _, p := range s.progs {
		if p != nil {
			p.Close()
		}
	}
	s.progs = [3]*ebpf.Program{}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
		b.Fatalf("%s run did not stop in 30s", s.bin)
	}
}

// agentPrograms finds the agent's exec, fork and exit programs through the
// BPF file descriptors it holds, so their run-time stats are its own.
func agentPrograms(b *testing.B, pid int) [3]*ebpf.Program {
	b.Helper()
	var out [3]*ebpf.Program
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fdinfo")
	if err != nil {
		b.Fatalf("reading the agent's fds: %v", err)
	}
	for _, fd := range fds {
		info, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		var id uint64
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				id, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			}
		}
		if id == 0 {
			continue
		}
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			continue
		}
		pi, err := prog.Info()
		if err != nil {
			prog.Close()
			continue
		}
		slot := map[string]int{"handle_exec": 0, "handle_fork": 1, "handle_exit": 2}
		if i, ok := slot[pi.Name]; ok && out[i] == nil {
			out[i] = prog
			continue
		}
		prog.Close()
	}
	return out
}
