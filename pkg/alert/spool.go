package alert

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// The spool is a directory of segment files, oldest first, appended to and
// fsynced on every append call. A segment starts with segMagic; each record
// is a little-endian uint32 length, a CRC-32C of the payload, and the
// payload. A crash can leave a torn record at a segment's tail: opening
// truncates it away and counts it. The read position lives in the file
// "cursor", replaced by rename after each delivered batch; losing it only
// redelivers (delivery is at least once).
const (
	segMagic      = "CSPOOL1\n"
	recHeader     = 8
	maxRecordSize = 16 << 20
	cursorFile    = "cursor"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// spoolLimits bound one spool; when full, the oldest segment is dropped.
type spoolLimits struct {
	maxBytes   int64
	maxEntries int
}

// spoolEvents receives what a spool drops, and its depth.
type spoolEvents interface {
	dropped(reason string, n int)
	depth(entries int, bytes int64)
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

	mu      sync.Mutex
	segs    []*segment // oldest first; the last is the one appended to
	head    pos
	active  *os.File
	entries int
	bytes   int64
	closed  bool
	rfile   *os.File // the head segment, open for reading
	rseg    uint64
}

func segPath(dir string, id uint64) string {
	return filepath.Join(dir, fmt.Sprintf("seg-%020d.log", id))
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

func (s *spool) newSegment(id uint64) error {
	f, err := os.OpenFile(segPath(s.dir, id), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating spool segment: %w", err)
	}
	if _, err := f.Write([]byte(segMagic)); err != nil {
		f.Close()
		return fmt.Errorf("writing spool segment: %w", err)
	}
	if s.active != nil {
		if err := s.active.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("syncing spool segment: %w", err)
		}
		s.active.Close()
	}
	s.active = f
	s.segs = append(s.segs, &segment{id: id, size: int64(len(segMagic))})
	return syncDir(s.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing spool directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing spool directory: %w", err)
	}
	return nil
}

// dropOldest drops the oldest segment's undelivered records.
func (s *spool) dropOldest() {
	old := s.segs[0]
	s.segs = s.segs[1:]
	s.entries -= old.entries
	s.bytes -= old.bytes
	s.ev.dropped("overflow", old.entries)
	_ = os.Remove(segPath(s.dir, old.id))
	s.head = pos{s.segs[0].id, int64(len(segMagic))}
}

// append writes the records and fsyncs; when the spool is full it drops
// the oldest segments first.
func (s *spool) append(records [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("spool closed")
	}
	var buf []byte
	var n int
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		act := s.segs[len(s.segs)-1]
		if _, err := s.active.Write(buf); err != nil {
			_ = s.active.Truncate(act.size) // leave no torn record behind
			return fmt.Errorf("writing spool: %w", err)
		}
		act.size += int64(len(buf))
		act.entries += n
		act.bytes += int64(len(buf))
		s.entries += n
		s.bytes += int64(len(buf))
		buf, n = buf[:0], 0
		return nil
	}
	for _, r := range records {
		sz := int64(recHeader + len(r))
		if sz > s.limits.maxBytes || len(r) > maxRecordSize {
			s.ev.dropped("too_large", 1)
			continue
		}
		act := s.segs[len(s.segs)-1]
		if act.size+int64(len(buf)) >= s.segMax.maxBytes || act.entries+n >= s.segMax.maxEntries {
			if err := flush(); err != nil {
				return err
			}
			if err := s.newSegment(act.id + 1); err != nil {
				return err
			}
		}
		for s.bytes+int64(len(buf))+sz > s.limits.maxBytes || s.entries+n+1 > s.limits.maxEntries {
			if err := flush(); err != nil {
				return err
			}
			if len(s.segs) == 1 {
				if err := s.newSegment(s.segs[0].id + 1); err != nil {
					return err
				}
			}
			s.dropOldest()
		}
		buf = appendRecord(buf, r)
		n++
	}
	if err := flush(); err != nil {
		return err
	}
	if err := s.active.Sync(); err != nil {
		return fmt.Errorf("syncing spool: %w", err)
	}
	s.ev.depth(s.entries, s.bytes)
	return nil
}

// peek reads up to maxN records (and about maxBytes) from the head,
// without consuming them; ack(next, len(records)) consumes them.
func (s *spool) peek(maxN int, maxBytes int64) (records [][]byte, next pos, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, pos{}, errors.New("spool closed")
	}
	s.advance()
	seg := s.segs[0]
	if s.head.off >= seg.size {
		return nil, s.head, nil
	}
	if s.rfile == nil || s.rseg != seg.id {
		if s.rfile != nil {
			s.rfile.Close()
		}
		f, err := os.Open(segPath(s.dir, seg.id))
		if err != nil {
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

// advance moves the head off a fully read segment that is no longer
// appended to, deleting it.
func (s *spool) advance() {
	for len(s.segs) > 1 && s.head.off >= s.segs[0].size {
		_ = os.Remove(segPath(s.dir, s.segs[0].id))
		s.segs = s.segs[1:]
		s.head = pos{s.segs[0].id, int64(len(segMagic))}
	}
}

// ack consumes n records up to next, unless their segment was dropped.
func (s *spool) ack(next pos, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || next.seg != s.head.seg || next.off <= s.head.off {
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
	err := s.active.Sync()
	if cerr := s.active.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("closing spool: %w", err)
	}
	return nil
}
