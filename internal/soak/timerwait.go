package soak

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The timer stands in for a responder's client, which runs on another
// machine; on the soak's node it waited for a CPU behind the load like
// any other process, and what it waited was counted as the agent's. Until
// the twenty-second hour the client's p99 was 3 ms over the agent's own.
// It now runs at a raised priority (timerNice, for its session's autogroup
// and each of its threads) and reports, with each query, how long its own
// threads waited for a CPU while it timed it (schedstat's run_delay,
// summed): the soak shows what the instrument waited, not only the total.

// timerNice is the timer's nice value: a nice-0 task's weight is 1024, a
// nice -10 one's 9548.
const timerNice = -10

// raiseTimer gives the timer's session (its autogroup, where the kernel
// has them) and each of its threads timerNice; threads made later inherit
// it from the thread that makes them.
func raiseTimer() error {
	var errs []error
	if err := os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(timerNice)), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("raising the timer's autogroup: %w", err))
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing the timer's threads: %w", err))...)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, timerNice); err != nil {
			errs = append(errs, fmt.Errorf("raising the timer's thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}

// runDelay is how long the process's threads have waited for a CPU in
// all (cpuTimes).
func runDelay() (time.Duration, error) {
	c, err := cpuTimes("self")
	return c.waited, err
}

// cpuTime is a schedstat file's first two counts: the time on a CPU and
// the time runnable, waiting for one.
type cpuTime struct{ ran, waited time.Duration }

// cpuTimes is how long process pid's threads ("self": this process's)
// have run and waited for a CPU in all (each thread's schedstat, summed;
// an exited thread's is lost, so a difference across one may be short by
// its share).
func cpuTimes(pid string) (cpuTime, error) {
	paths, err := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
	if err != nil || len(paths) == 0 {
		return cpuTime{}, fmt.Errorf("listing process %s's threads: %w", pid, cmpErr(err, os.ErrNotExist))
	}
	var sum cpuTime
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited between the listing and the read
		}
		if err != nil {
			return cpuTime{}, fmt.Errorf("reading %s: %w", p, err)
		}
		c, err := parseSchedstat(b)
		if err != nil {
			return cpuTime{}, fmt.Errorf("reading %s: %w", p, err)
		}
		sum.ran += c.ran
		sum.waited += c.waited
	}
	return sum, nil
}

// parseSchedstat reads a schedstat file: "<ns on a CPU> <ns waiting for
// one> <timeslices>\n".
func parseSchedstat(b []byte) (cpuTime, error) {
	f := bytes.Fields(b)
	if len(f) != 3 {
		return cpuTime{}, fmt.Errorf("parsing schedstat %.60q: %d fields, want 3", b, len(f))
	}
	var ns [2]int64
	for i, name := range []string{"run time", "run_delay"} {
		var err error
		if ns[i], err = strconv.ParseInt(string(f[i]), 10, 64); err != nil || ns[i] < 0 {
			return cpuTime{}, fmt.Errorf("parsing schedstat %.60q: %s %q is not a count of nanoseconds", b, name, f[i])
		}
	}
	return cpuTime{ran: time.Duration(ns[0]), waited: time.Duration(ns[1])}, nil
}
