package soak

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// agents runs `correlator run` processes one after another on the same
// store, pins and address, as a DaemonSet's pod is replaced on a node.
type agents struct {
	bin  string
	args []string
	base string // http://addr
	logs string // directory of each agent's stderr
	// procs are cgroup.procs files each agent's PID is written to: its
	// pod's cgroup (KubeletQoS).
	procs []string

	mu   sync.Mutex
	cur  *agentProc
	gen  int
	dead []error // agents that exited on their own
}

// agentProc is one agent process.
type agentProc struct {
	gen  int
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// start runs the next agent and waits until it is ready.
func (a *agents) start(ready time.Duration) (*agentProc, error) {
	a.mu.Lock()
	a.gen++
	gen := a.gen
	a.mu.Unlock()
	logPath := filepath.Join(a.logs, fmt.Sprintf("agent-%d.log", gen))
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the agent's log: %w", err)
	}
	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting agent %d: %w", gen, err)
	}
	p := &agentProc{gen: gen, cmd: cmd, done: make(chan struct{}), log: logPath}
	for _, f := range a.procs {
		if err := os.WriteFile(f, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			lf.Close()
			return nil, fmt.Errorf("moving agent %d into its pod's cgroup %s: %w", gen, f, err)
		}
	}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(ready)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(a.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("starting agent %d: it exited before ready (%v); log %s", gen, p.err, logPath)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			<-p.done
			return nil, fmt.Errorf("starting agent %d: not ready after %s; log %s", gen, ready, logPath)
		}
	}
	a.mu.Lock()
	a.cur = p
	a.mu.Unlock()
	return p, nil
}

// current returns the running agent, nil between two.
func (a *agents) current() *agentProc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}

// currentPID is the running agent's PID, 0 between two.
func (a *agents) currentPID() int {
	if p := a.current(); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// stop ends the running agent with sig (SIGTERM: an upgrade's graceful
// stop; SIGKILL: a crash) and waits for it. A graceful stop must exit 0.
func (a *agents) stop(sig syscall.Signal, grace time.Duration) error {
	a.mu.Lock()
	p := a.cur
	a.cur = nil
	a.mu.Unlock()
	if p == nil {
		return errors.New("stopping the agent: none is running")
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling agent %d: %w", p.gen, err)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("stopping agent %d: still running %s after %v; log %s", p.gen, grace, sig, p.log)
	}
	if sig == syscall.SIGTERM && p.err != nil {
		return fmt.Errorf("stopping agent %d: exited with %v after SIGTERM; log %s", p.gen, p.err, p.log)
	}
	return nil
}

// exited reports an agent that ended without being asked to.
func (a *agents) exited() error {
	p := a.current()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return fmt.Errorf("agent %d exited on its own: %v; log %s", p.gen, p.err, p.log)
	default:
		return nil
	}
}
