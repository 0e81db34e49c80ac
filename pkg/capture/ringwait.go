package capture

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ringWaiter waits for the kernel's backlog wakeup on Go's netpoller, not
// in a blocking epoll_wait. A goroutine blocked in a syscall holds its P,
// and each return from a 100 ms wait woke the runtime's sysmon into
// polling every 20 µs again (14 % of the agent's perf samples at 300
// execs/s, 4 % after: docs/benchmarks.md). The netpoller waits with every
// P idle, so sysmon sleeps until the next timer.
type ringWaiter struct {
	f  *os.File
	rc syscall.RawConn
}

// newRingWaiter registers a duplicate of the ring map's descriptor with
// the netpoller (a BPF ring buffer map supports poll).
func newRingWaiter(m *ebpf.Map) (*ringWaiter, error) {
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating the ring buffer's descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("setting the ring buffer's descriptor non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(fd), "ringbuf")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("polling the ring buffer: %w", err)
	}
	return &ringWaiter{f: f, rc: rc}, nil
}

// wait returns when the kernel wakes the ring's readers (a backlog of
// WakeupBytes), after d, or at once if a wakeup came since the last wait.
// It returns os.ErrClosed once the waiter is closed.
func (w *ringWaiter) wait(d time.Duration) error {
	if err := w.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return fmt.Errorf("setting the ring buffer's wait: %w", err)
	}
	calls := 0
	// The first call only asks to wait; the second runs once readiness
	// (or a wakeup noted earlier) is seen.
	err := w.rc.Read(func(uintptr) bool { calls++; return calls > 1 })
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

func (w *ringWaiter) Close() error { return w.f.Close() }
