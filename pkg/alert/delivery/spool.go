package delivery

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
)

// The spool is a directory of segment files, oldest first, appended to and
// fsynced on every append call. A segment starts with segMagic; each record
// is a little-endian uint32 length, a CRC-32C of the payload, and the
// payload. A crash can leave a torn record at a segment's tail: opening
// truncates it away and counts it. The read position lives in the file
// "cursor" (spool_cursor.go), replaced atomically after each delivered
// batch. A segment is deleted as soon as all of it is delivered, the one
// appended to included, so delivered alerts never hold disk space.
//
// Delivery is at least once: a crash between a sink accepting a batch and
// the cursor reaching disk sends that batch again after the restart.
const (
	segMagic      = "CSPOOL1\n"
	recHeader     = 8
	maxRecordSize = 16 << 20
)

// ErrDiskFull marks alerts a spool could not hold because its filesystem
// is full (or within the spool's free-space reserve).
var ErrDiskFull = errors.New("spool filesystem full")

var errSpoolClosed = errors.New("spool closed")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// spoolLimits bound one spool; when full, the oldest segment is dropped.
// minFree is free space the spool leaves on its filesystem, so that saving
// the read position and starting a segment still work when it is full.
type spoolLimits struct {
	maxBytes   int64
	maxEntries int
	minFree    int64
}

// spoolEvents receives what a spool drops, and its depth.
type spoolEvents interface {
	dropped(reason string, n int)
	depth(entries int, bytes int64)
	// cursorInvalid reports a cursor file that could not be read: delivery
	// restarts at the oldest segment, sending some alerts again.
	cursorInvalid(err error)
}

type segment struct {
	id      uint64
	size    int64 // bytes in the file, header included
	entries int   // records not yet delivered
	bytes   int64 // their bytes
}

// pos is a read position: a segment and an offset in it.
type pos struct {
	seg uint64
	off int64
}

type spool struct {
	dir    string
	limits spoolLimits
	segMax spoolLimits
	ev     spoolEvents

	mu   sync.Mutex
	segs []*segment // oldest first
	// head is the next record to deliver; with no segments it is the start
	// of the next one.
	head pos
	// active is the last segment, open for appending; nil when the next
	// append starts a new segment.
	active  *os.File
	nextID  uint64 // the next segment's id, above every id used before
	entries int
	bytes   int64
	closed  bool
	rfile   *os.File // the head segment, open for reading
	rseg    uint64

	buf   []byte // records encoded for the active segment, not yet written
	bufN  int
	wrote int // records written by the current append call
}

// parseRecord reads one record from b: its payload and total length; ok is
// false for a torn, oversized or corrupt record.
func parseRecord(b []byte) (payload []byte, n int, ok bool) {
	if len(b) < recHeader {
		return nil, 0, false
	}
	l := binary.LittleEndian.Uint32(b)
	if l > maxRecordSize || int(l) > len(b)-recHeader {
		return nil, 0, false
	}
	payload = b[recHeader : recHeader+int(l)]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return payload, recHeader + int(l), true
}

func appendRecord(dst, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(payload, crcTable))
	return append(dst, payload...)
}

// append writes the records and fsyncs; when the spool is full it drops
// the oldest segments first. It returns how many records it spooled and how
// many it lost: too large ones are counted and skipped; on an error (a full
// disk wraps ErrDiskFull) every record not yet written is counted and lost.
func (s *spool) append(records [][]byte) (spooled, lost int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, len(records), errSpoolClosed
	}
	s.wrote = 0
	room := s.room()
	tooLarge := 0
	for _, r := range records {
		sz := int64(recHeader + len(r))
		if sz > s.limits.maxBytes || len(r) > maxRecordSize {
			tooLarge++
			continue
		}
		if sz > room {
			err = fmt.Errorf("writing spool segment: %w", ErrDiskFull)
			break
		}
		if err = s.fit(sz); err != nil {
			break
		}
		s.buf = appendRecord(s.buf, r)
		s.bufN++
		room -= sz
	}
	if ferr := s.flush(); err == nil {
		err = ferr
	}
	if err == nil && s.active != nil {
		if serr := s.active.Sync(); serr != nil {
			err = fmt.Errorf("syncing spool segment: %w", serr)
		}
	}
	if tooLarge > 0 {
		s.ev.dropped("too_large", tooLarge)
	}
	lost = len(records) - s.wrote - tooLarge
	if lost > 0 {
		s.ev.dropped(lossReason(err), lost)
	}
	s.ev.depth(s.entries, s.bytes)
	return s.wrote, lost + tooLarge, err
}

// lossReason is the dropped{reason} for alerts an append error lost.
func lossReason(err error) string {
	if errors.Is(err, ErrDiskFull) {
		return "disk_full"
	}
	return "write_error"
}

// fit makes room for a record of sz bytes: it starts a new segment when the
// active one is full and drops the oldest while the spool is over its bound.
func (s *spool) fit(sz int64) error {
	if s.active != nil {
		act := s.segs[len(s.segs)-1]
		if act.size+int64(len(s.buf)) >= s.segMax.maxBytes || act.entries+s.bufN >= s.segMax.maxEntries {
			if err := s.flush(); err != nil {
				return err
			}
			if err := s.seal(); err != nil {
				return err
			}
		}
	}
	for s.bytes+int64(len(s.buf))+sz > s.limits.maxBytes || s.entries+s.bufN+1 > s.limits.maxEntries {
		if err := s.flush(); err != nil {
			return err
		}
		if len(s.segs) == 0 {
			break // nothing left to drop
		}
		if len(s.segs) == 1 {
			if err := s.seal(); err != nil {
				return err
			}
		}
		s.dropOldest()
	}
	if s.active == nil {
		return s.newSegment()
	}
	return nil
}

// flush writes the buffered records to the active segment; on an error
// they are lost.
func (s *spool) flush() error {
	if s.bufN == 0 {
		return nil
	}
	buf, n := s.buf, s.bufN
	s.buf, s.bufN = s.buf[:0], 0
	act := s.segs[len(s.segs)-1]
	if _, err := s.active.Write(buf); err != nil {
		if terr := s.active.Truncate(act.size); terr != nil {
			// A torn record stays at the tail: append no more after it.
			s.active.Close()
			s.active = nil
		}
		return fmt.Errorf("writing spool segment: %w", diskFull(err))
	}
	act.size += int64(len(buf))
	act.entries += n
	act.bytes += int64(len(buf))
	s.entries += n
	s.bytes += int64(len(buf))
	s.wrote += n
	return nil
}

// diskFull wraps ErrDiskFull around an error that says the disk is full.
func diskFull(err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

// room is how many bytes the spool may write before reaching its
// free-space reserve.
func (s *spool) room() int64 {
	const unbounded = 1 << 62
	if s.limits.minFree <= 0 {
		return unbounded
	}
	free, ok := freeBytes(s.dir)
	if !ok {
		return unbounded
	}
	return free - s.limits.minFree
}

// peek reads up to maxN records (and about maxBytes) from the head,
// without consuming them; ack(next, len(records)) consumes them.
func (s *spool) peek(maxN int, maxBytes int64) (records [][]byte, next pos, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, pos{}, errSpoolClosed
	}
	s.advance()
	if len(s.segs) == 0 || s.head.off >= s.segs[0].size {
		return nil, s.head, nil
	}
	seg := s.segs[0]
	if s.rfile == nil || s.rseg != seg.id {
		if s.rfile != nil {
			s.rfile.Close()
		}
		f, err := os.Open(segPath(s.dir, seg.id))
		if err != nil {
			s.rfile = nil
			return nil, pos{}, fmt.Errorf("opening spool segment: %w", err)
		}
		s.rfile, s.rseg = f, seg.id
	}
	want := min(seg.size-s.head.off, maxBytes)
	buf := make([]byte, want)
	if _, err := s.rfile.ReadAt(buf, s.head.off); err != nil && !errors.Is(err, io.EOF) {
		return nil, pos{}, fmt.Errorf("reading spool: %w", err)
	}
	off := 0
	for len(records) < maxN {
		rec, n, ok := parseRecord(buf[off:])
		if !ok {
			break
		}
		records = append(records, rec)
		off += n
	}
	if len(records) == 0 { // one record larger than maxBytes
		full := make([]byte, seg.size-s.head.off)
		if _, err := s.rfile.ReadAt(full, s.head.off); err != nil && !errors.Is(err, io.EOF) {
			return nil, pos{}, fmt.Errorf("reading spool: %w", err)
		}
		rec, n, ok := parseRecord(full)
		if !ok { // damaged after it was written: skip the rest of the segment
			s.ev.dropped("corrupt", seg.entries)
			s.entries -= seg.entries
			s.bytes -= seg.bytes
			seg.entries, seg.bytes = 0, 0
			s.head.off = seg.size
			s.ev.depth(s.entries, s.bytes)
			return nil, s.head, nil
		}
		records, off = append(records, rec), n
	}
	return records, pos{seg.id, s.head.off + int64(off)}, nil
}

// ack consumes n records up to next, unless their segment was dropped, and
// saves the new read position. An error means the position is not on disk:
// a restart sends those records again.
func (s *spool) ack(next pos, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.segs) == 0 || next.seg != s.head.seg || next.off <= s.head.off {
		return nil
	}
	seg := s.segs[0]
	used := next.off - s.head.off
	seg.entries -= n
	seg.bytes -= used
	s.entries -= n
	s.bytes -= used
	s.head = next
	s.advance()
	if len(s.segs) == 1 && s.active != nil && s.head.off >= s.segs[0].size {
		// All delivered: delete the active segment too rather than waiting
		// for it to fill, so a full disk gets the space back now. The next
		// append starts a segment with a new id, so the cursor never points
		// into reused bytes.
		s.active.Close()
		s.active = nil
		s.advance()
	}
	s.ev.depth(s.entries, s.bytes)
	return writeCursor(s.dir, s.head)
}

// depth returns the undelivered records.
func (s *spool) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries
}

func (s *spool) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.rfile != nil {
		s.rfile.Close()
	}
	if s.active == nil {
		return nil
	}
	err := s.active.Sync()
	if cerr := s.active.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("closing spool: %w", err)
	}
	return nil
}
