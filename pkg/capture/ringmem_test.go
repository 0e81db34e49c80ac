package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/execid/correlator/internal/testutil"
)

// fakeRing lays a ring buffer out in Go memory as the kernel maps it: a
// consumer page, a producer page, and the data pages twice in a row, so
// ringView's reads are tested on records the test wrote byte by byte.
type fakeRing struct {
	cons, prod, data []byte
	size             uint64
}

func newFakeRing(size int) *fakeRing {
	return &fakeRing{cons: make([]byte, 4096), prod: make([]byte, 4096), data: make([]byte, 2*size), size: uint64(size)}
}

func (f *fakeRing) view() *ringView {
	return &ringView{cons: f.cons, prod: f.prod, data: f.data, mask: uintptr(f.size - 1),
		consPos: (*uintptr)(unsafe.Pointer(&f.cons[0])), prodPos: (*uintptr)(unsafe.Pointer(&f.prod[0]))}
}

func (f *fakeRing) pos(page []byte) uint64 { return binary.LittleEndian.Uint64(page) }

// put writes b at logical position q into both copies of the data.
func (f *fakeRing) put(q uint64, b []byte) {
	for i, c := range b {
		at := (q + uint64(i)) & (f.size - 1)
		f.data[at], f.data[at+f.size] = c, c
	}
}

// produce appends a record with hdrBits (busy, discard) and returns its
// header's position.
func (f *fakeRing) produce(payload []byte, hdrBits uint32) uint64 {
	at := f.pos(f.prod)
	hdr := make([]byte, ringHdrSize)
	binary.LittleEndian.PutUint32(hdr, uint32(len(payload))|hdrBits)
	f.put(at, hdr)
	f.put(at+ringHdrSize, payload)
	binary.LittleEndian.PutUint64(f.prod, at+ringHdrSize+uint64(len(payload)+7)&^7)
	return at
}

func (f *fakeRing) setHeader(at uint64, n int, hdrBits uint32) {
	hdr := make([]byte, 4)
	binary.LittleEndian.PutUint32(hdr, uint32(n)|hdrBits)
	f.put(at, hdr)
}

// readAll reads up to max records, copying each.
func readAll(t *testing.T, v *ringView, max int) ([]string, error) {
	t.Helper()
	var got []string
	n, err := v.read(max, func(frame []byte) { got = append(got, string(frame)) })
	if n != len(got) {
		t.Fatalf("read reported %d records, gave %d", n, len(got))
	}
	return got, err
}

func TestRingViewReadsInOrderWithinMax(t *testing.T) {
	f := newFakeRing(256)
	v := f.view()
	for i := range 3 {
		f.produce([]byte(fmt.Sprintf("record-%d", i)), 0)
	}
	got, err := readAll(t, v, 2)
	if err != nil || fmt.Sprint(got) != "[record-0 record-1]" {
		t.Fatalf("first read = %q, %v; want the first two", got, err)
	}
	if v.available() == 0 {
		t.Fatal("the third record was consumed by a read bounded at two")
	}
	got, err = readAll(t, v, 10)
	if err != nil || fmt.Sprint(got) != "[record-2]" {
		t.Fatalf("second read = %q, %v; want the third", got, err)
	}
	if f.pos(f.cons) != f.pos(f.prod) || v.available() != 0 {
		t.Fatalf("consumer at %d, producer at %d: the ring should be empty", f.pos(f.cons), f.pos(f.prod))
	}
	if got, err := readAll(t, v, 10); err != nil || len(got) != 0 {
		t.Fatalf("reading an empty ring = %q, %v", got, err)
	}
}

func TestRingViewWrapsAround(t *testing.T) {
	f := newFakeRing(64)
	v := f.view()
	// 13-byte records take 24 bytes with header and padding; two a round
	// in a 64-byte ring start at ever other offsets, so records cross the
	// ring's end in most rounds.
	crossed := 0
	for round := range 16 {
		want := []string{fmt.Sprintf("round %02d a xx", round), fmt.Sprintf("round %02d b xx", round)}
		for _, w := range want {
			if at := f.produce([]byte(w), 0); at&63 > 64-24 {
				crossed++
			}
		}
		got, err := readAll(t, v, 10)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: read %q, %v; want %q", round, got, err, want)
		}
	}
	if crossed == 0 {
		t.Fatal("no record crossed the ring's end: the test proves nothing")
	}
}

func TestRingViewSkipsDiscarded(t *testing.T) {
	f := newFakeRing(256)
	v := f.view()
	f.produce([]byte("kept-1"), 0)
	f.produce([]byte("dropped"), ringDiscardBit)
	f.produce([]byte("kept-2"), 0)
	got, err := readAll(t, v, 10)
	if err != nil || fmt.Sprint(got) != "[kept-1 kept-2]" {
		t.Fatalf("read %q, %v; want the discarded record skipped", got, err)
	}
	if f.pos(f.cons) != f.pos(f.prod) {
		t.Fatal("the discarded record's space was not given back")
	}
}

func TestRingViewStopsAtBusyRecord(t *testing.T) {
	f := newFakeRing(256)
	v := f.view()
	f.produce([]byte("before"), 0)
	busy := f.produce([]byte("in flight"), ringBusyBit)
	got, err := readAll(t, v, 10)
	if !errors.Is(err, errRingBusy) || fmt.Sprint(got) != "[before]" {
		t.Fatalf("read %q, %v; want the record before, then errRingBusy", got, err)
	}
	if f.pos(f.cons) != busy {
		t.Fatalf("consumer at %d; want it at the busy record (%d), its space kept", f.pos(f.cons), busy)
	}
	// The kernel submits it: the next read gives it.
	f.setHeader(busy, len("in flight"), 0)
	if got, err := readAll(t, v, 10); err != nil || fmt.Sprint(got) != "[in flight]" {
		t.Fatalf("after submit: read %q, %v", got, err)
	}
}

func TestRingViewRefusesRecordPastProducer(t *testing.T) {
	f := newFakeRing(256)
	v := f.view()
	f.produce([]byte("good"), 0)
	at := f.produce([]byte("short"), 0)
	f.setHeader(at, 100, 0) // claims more than the producer has written
	var got []string
	_, err := v.read(10, func(frame []byte) { got = append(got, string(frame)) })
	if err == nil || fmt.Sprint(got) != "[good]" {
		t.Fatalf("read %q, %v; want the good record, then an error", got, err)
	}
	if f.pos(f.cons) != at {
		t.Fatal("the consumer moved past a record it could not read")
	}
}

// The frame handed to fn is the ring's memory: a caller keeps what it
// needs by copying (Decoder.Decode copies every string).
func TestRingViewFrameIsTheRecord(t *testing.T) {
	f := newFakeRing(64)
	v := f.view()
	f.produce(bytes.Repeat([]byte{0xab}, 24), 0)
	_, err := v.read(1, func(frame []byte) {
		if len(frame) != 24 || frame[0] != 0xab || frame[23] != 0xab {
			t.Errorf("frame = %x", frame)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// On a real ring buffer map: the pages map as laid out above, an empty
// ring reads nothing, and a closed view refuses reads (os.ErrClosed, which
// ends RunBatches) and closes twice without error.
func TestRingViewOnKernelMap(t *testing.T) {
	testutil.RequireRoot(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatalf("creating a ring buffer map: %v", err)
	}
	defer m.Close()
	v, err := newRingView(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.data) != 2<<16 || v.available() != 0 {
		t.Fatalf("data mapped %d bytes, %d available; want %d and 0", len(v.data), v.available(), 2<<16)
	}
	if n, err := v.read(10, func([]byte) { t.Error("a record in an empty ring") }); n != 0 || err != nil {
		t.Fatalf("reading an empty ring = %d, %v", n, err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.read(10, func([]byte) {}); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("reading a closed view = %v; want os.ErrClosed", err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("closing twice: %v", err)
	}
}
