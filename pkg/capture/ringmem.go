package capture

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ringView reads the ring buffer's records straight from its mapped
// pages, with no system call. ringbuf.Reader asks epoll_wait before each
// drain even when the ring holds data, and each such syscall, made while
// every P was idle, woke the runtime's sysmon into polling every 20 µs
// for a millisecond or more: on a paravirtualized node those sleeps were
// 14 % of the agent's CPU at 300 execs/s (docs/benchmarks.md). Waiting is
// ringWaiter's job (on the netpoller); this only reads.
//
// The layout is the kernel's (kernel/bpf/ringbuf.c): a consumer page the
// reader writes, then a producer page and the data pages, mapped twice in
// a row so that a record that wraps around reads as one slice. Each
// record is an 8-byte header (its length, with a busy and a discard bit)
// and its data, padded to 8 bytes.
type ringView struct {
	mu               sync.Mutex
	cons, prod       []byte
	consPos, prodPos *uintptr
	data             []byte
	mask             uintptr
}

const (
	ringHdrSize    = 8
	ringBusyBit    = 1 << 31
	ringDiscardBit = 1 << 30
	busySpins      = 1 << 16
)

// errRingBusy: the next record is reserved but not yet submitted.
var errRingBusy = errors.New("ring record not yet submitted")

func newRingView(m *ebpf.Map) (*ringView, error) {
	size, page := int(m.MaxEntries()), os.Getpagesize()
	cons, err := unix.Mmap(m.FD(), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the ring buffer's consumer page: %w", err)
	}
	prod, err := unix.Mmap(m.FD(), int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, fmt.Errorf("mapping the ring buffer's data pages: %w", err)
	}
	return &ringView{
		cons: cons, prod: prod,
		consPos: (*uintptr)(unsafe.Pointer(&cons[0])),
		prodPos: (*uintptr)(unsafe.Pointer(&prod[0])),
		data:    prod[page:],
		mask:    uintptr(size - 1),
	}, nil
}

// read calls fn with each submitted record in order, up to max of them,
// and returns how many it gave. fn's frame is valid only during the call:
// the record's space goes back to the kernel after it. A record the
// kernel is still writing ends the read (errRingBusy, with what came
// before it given); os.ErrClosed after Close.
func (v *ringView) read(max int, fn func(frame []byte)) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.data == nil {
		return 0, os.ErrClosed
	}
	// The producer's position is loaded once: records submitted after it
	// wait for the next read, which keeps one read bounded.
	prod := atomic.LoadUintptr(v.prodPos)
	cons := atomic.LoadUintptr(v.consPos)
	n := 0
	for n < max && cons < prod {
		if prod-cons < ringHdrSize {
			return n, fmt.Errorf("reading a ring record's header: %d bytes left", prod-cons)
		}
		// An atomic load pairs with the kernel's release of the busy bit,
		// so the data is visible once the bit is clear.
		hdrp := (*uint32)(unsafe.Pointer(&v.data[cons&v.mask]))
		hdr := atomic.LoadUint32(hdrp)
		// A reserved record is submitted within the BPF program's run,
		// which nothing preempts: wait for it a little, as ringbuf does.
		for i := 0; hdr&ringBusyBit != 0 && i < busySpins; i++ {
			hdr = atomic.LoadUint32(hdrp)
		}
		if hdr&ringBusyBit != 0 {
			return n, errRingBusy
		}
		size := uintptr(hdr &^ (ringBusyBit | ringDiscardBit))
		start := (cons + ringHdrSize) & v.mask
		next := cons + ringHdrSize + (size+7)&^7
		if next > prod {
			return n, fmt.Errorf("reading a ring record of %d bytes: %d bytes left", size, prod-cons)
		}
		if hdr&ringDiscardBit == 0 {
			fn(v.data[start : start+size])
			n++
		}
		cons = next
		atomic.StoreUintptr(v.consPos, cons)
	}
	return n, nil
}

// available is the bytes the kernel has submitted or reserved past the
// consumer.
func (v *ringView) available() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.data == nil {
		return 0
	}
	return int(atomic.LoadUintptr(v.prodPos) - atomic.LoadUintptr(v.consPos))
}

func (v *ringView) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.data == nil {
		return nil
	}
	v.data = nil
	return errors.Join(unix.Munmap(v.prod), unix.Munmap(v.cons))
}
