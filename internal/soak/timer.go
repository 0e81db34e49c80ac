package soak

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
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

// timing is what the timer measured of one query.
type timing struct {
	took      time.Duration // from the request's write to the body's last byte
	firstByte time.Duration // from the request's write to the response's first byte
	waited    time.Duration // the timer's threads' wait for a CPU within took; unknownWait: not read
}

// get has the timer GET url and returns what it measured.
func (t *timer) get(url string) (timing, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := io.WriteString(t.in, url+"\n"); err != nil {
		return timing{}, fmt.Errorf("asking the query timer: %w", err)
	}
	if !t.out.Scan() {
		return timing{}, fmt.Errorf("reading the query timer: %w", cmpErr(t.out.Err(), io.ErrUnexpectedEOF))
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

// unknownWait is the wait the timer reports when it could not read its
// threads' schedstat.
const unknownWait = time.Duration(-1)

// parseTimed reads the timer's answer: the nanoseconds it took, those the
// timer waited for a CPU (unknownWait: not read) and those to the first
// byte, then an error if any.
func parseTimed(line string) (timing, error) {
	f := strings.SplitN(line, " ", 4)
	if len(f) < 3 {
		return timing{}, fmt.Errorf("reading the query timer's answer %q: want three counts", line)
	}
	var ns [3]int64
	for i := range ns {
		var err error
		if ns[i], err = strconv.ParseInt(f[i], 10, 64); err != nil || ns[i] < 0 && !(i == 1 && ns[i] == int64(unknownWait)) {
			return timing{}, fmt.Errorf("reading the query timer's answer %q: %q is not a count of nanoseconds", line, f[i])
		}
	}
	tm := timing{took: time.Duration(ns[0]), waited: time.Duration(ns[1]), firstByte: time.Duration(ns[2])}
	if len(f) == 4 && f[3] != "" {
		return tm, errors.New(f[3])
	}
	return tm, nil
}

// ServeTimer is the timer's side: for each URL read from r, a GET (over a
// blocking socket kept alive, blockingClient), its body read whole, and a
// line to w with the nanoseconds it took, those its threads waited for a
// CPU meanwhile (runDelay), those to the response's first byte and, if it
// failed, why.
// It raises its priority first (raiseTimer); one it cannot raise is said
// on stderr, and the waits show what that cost.
func ServeTimer(r io.Reader, w io.Writer, stderr io.Writer) error {
	if err := raiseTimer(); err != nil {
		fmt.Fprintln(stderr, "query timer:", err)
	}
	hc := newBlockingClient()
	defer hc.close()
	in := bufio.NewScanner(r)
	out := bufio.NewWriter(w)
	for in.Scan() {
		before, berr := runDelay()
		start := time.Now()
		first, err := hc.get(in.Text(), start)
		d := time.Since(start)
		after, aerr := runDelay()
		waited := max(after-before, 0)
		if werr := cmp.Or(berr, aerr); werr != nil {
			waited = unknownWait // the query's answer stands; the wait is counted unknown
			fmt.Fprintln(stderr, "query timer:", werr)
		}
		line := strconv.FormatInt(int64(d), 10) + " " + strconv.FormatInt(int64(waited), 10) + " " + strconv.FormatInt(int64(first), 10)
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
