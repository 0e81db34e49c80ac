package delivery

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// openSpool opens or creates the spool in dir, recovering from a crash. It
// writes nothing but truncations and deletions, so it works on a full disk.
func openSpool(dir string, limits spoolLimits, ev spoolEvents) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating spool directory: %w", err)
	}
	s := &spool{dir: dir, limits: limits, ev: ev, segMax: spoolLimits{
		maxBytes: max(limits.maxBytes/8, 4096), maxEntries: max(limits.maxEntries/8, 1)}}
	names, err := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	if err != nil {
		return nil, fmt.Errorf("listing spool segments: %w", err)
	}
	var ids []uint64
	for _, n := range names {
		id, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(n), "seg-"), ".log"), 10, 64)
		if err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	cur, cerr := readCursor(dir)
	if cerr != nil {
		if !errors.Is(cerr, fs.ErrNotExist) {
			ev.cursorInvalid(cerr)
		}
		cur = pos{} // start at the oldest segment
	}
	// Segment ids only grow, past the cursor's too: a cursor left pointing
	// at a deleted segment must never match a new one.
	s.nextID = max(cur.seg+1, 1)
	if len(ids) > 0 {
		s.nextID = max(s.nextID, ids[len(ids)-1]+1)
	}
	start := int64(len(segMagic))
	for _, id := range ids {
		if id < cur.seg {
			_ = os.Remove(segPath(dir, id)) // delivered before the restart
			continue
		}
		seg, off, err := s.recover(id, cur)
		if err != nil {
			return nil, err
		}
		if seg == nil {
			continue
		}
		if len(s.segs) == 0 {
			start = off
		}
		s.segs = append(s.segs, seg)
	}
	s.head = pos{s.nextID, int64(len(segMagic))}
	if len(s.segs) > 0 {
		s.head = pos{s.segs[0].id, start}
		last := s.segs[len(s.segs)-1]
		f, err := os.OpenFile(segPath(dir, last.id), os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening spool segment: %w", err)
		}
		s.active = f
	}
	for _, seg := range s.segs {
		s.entries += seg.entries
		s.bytes += seg.bytes
	}
	s.ev.depth(s.entries, s.bytes)
	return s, nil
}

// recover scans a segment, truncating a torn or corrupt tail, and counts
// the records at or after cur (when cur is in this segment); off is where
// delivery resumes in it. A segment without its header holds nothing that
// can be read: it is deleted and nil returned.
func (s *spool) recover(id uint64, cur pos) (seg *segment, off int64, err error) {
	p := segPath(s.dir, id)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, 0, fmt.Errorf("reading spool segment: %w", err)
	}
	if !bytes.HasPrefix(data, []byte(segMagic)) {
		// A header cut short is a crash while creating it, before any
		// record; anything else is damage.
		if !bytes.HasPrefix([]byte(segMagic), data) {
			s.ev.dropped("corrupt", 1)
		}
		if err := os.Remove(p); err != nil {
			return nil, 0, fmt.Errorf("removing damaged spool segment: %w", err)
		}
		return nil, 0, nil
	}
	seg = &segment{id: id}
	start := int64(len(segMagic))
	if cur.seg == id {
		start = -1 // until a record boundary matches the cursor
	}
	end := int64(len(segMagic))
	for {
		if end == cur.off && cur.seg == id {
			start = end
		}
		_, n, ok := parseRecord(data[end:])
		if !ok {
			break
		}
		end += int64(n)
	}
	if start < 0 { // the cursor is not on a record: deliver the segment again
		start = int64(len(segMagic))
	}
	for o := start; o < end; {
		_, n, _ := parseRecord(data[o:])
		seg.entries++
		seg.bytes += int64(n)
		o += int64(n)
	}
	if end < int64(len(data)) {
		s.ev.dropped("corrupt", 1)
		if err := os.Truncate(p, end); err != nil {
			return nil, 0, fmt.Errorf("truncating spool segment: %w", err)
		}
	}
	seg.size = end
	return seg, start, nil
}
