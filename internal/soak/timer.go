package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A query is timed in a process of its own, as a responder's kubectl or
// curl would ask: timed in the soak's process, it also waited for the
// load's goroutines (the exec spawns, the webhook posts, the verifier),
// which Go preempts every 10 ms, and the p99 measured them, not the
// agent (make soak: 25 to 45 ms in the soak's process while curl saw 13).
// It runs in a session of its own: the kernel's autogroups weigh a
// session's processes together, and in the soak's session it shared its
// CPU with the load's runc execs and the soak's goroutines (20 to 35 ms at
// p99 while curl from a shell saw at most 9.5). A responder's client runs
// on another machine.

// timerEnv makes the soak's test binary serve as the timer (TestMain).
const timerEnv = "CORRELATOR_SOAK_TIMER"

// timer is the child process that times GETs for the soak.
type timer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
}

// startTimer starts bin (the test binary) as the timer.
func startTimer(bin string) (*timer, error) {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), timerEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("starting the query timer: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting the query timer: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the query timer: %w", err)
	}
	return &timer{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// get has the timer GET url and returns how long the answer took.
func (t *timer) get(url string) (time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := io.WriteString(t.in, url+"\n"); err != nil {
		return 0, fmt.Errorf("asking the query timer: %w", err)
	}
	if !t.out.Scan() {
		return 0, fmt.Errorf("reading the query timer: %w", cmpErr(t.out.Err(), io.ErrUnexpectedEOF))
	}
	return parseTimed(t.out.Text())
}

// close ends the timer.
func (t *timer) close() error {
	t.in.Close()
	return t.cmd.Wait()
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// parseTimed reads the timer's answer: nanoseconds, then an error if any.
func parseTimed(line string) (time.Duration, error) {
	ns, msg, _ := strings.Cut(line, " ")
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading the query timer's answer %q: %w", line, err)
	}
	if msg != "" {
		return time.Duration(n), errors.New(msg)
	}
	return time.Duration(n), nil
}

// ServeTimer is the timer's side: for each URL read from r, a GET (the
// connection kept alive), its body read whole, and a line to w with the
// nanoseconds it took and, if it failed, why.
func ServeTimer(ctx context.Context, r io.Reader, w io.Writer) error {
	hc := &http.Client{Timeout: 10 * time.Second}
	in := bufio.NewScanner(r)
	out := bufio.NewWriter(w)
	for in.Scan() {
		start := time.Now()
		err := getAll(ctx, hc, in.Text())
		d := time.Since(start)
		line := strconv.FormatInt(int64(d), 10)
		if err != nil {
			line += " " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		if _, err := out.WriteString(line + "\n"); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
	return in.Err()
}

func getAll(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return nil
}
