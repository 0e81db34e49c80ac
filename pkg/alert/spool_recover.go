package alert

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// openSpool opens or creates the spool in dir, recovering from a crash.
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
	if cerr != nil || !slices.Contains(ids, cur.seg) {
		cur = pos{} // start at the oldest segment
	}
	for _, id := range ids {
		if cur.seg != 0 && id < cur.seg {
			_ = os.Remove(segPath(dir, id)) // delivered before the restart
			continue
		}
		seg, err := s.recover(id, cur)
		if err != nil {
			return nil, err
		}
		s.segs = append(s.segs, seg)
	}
	if len(s.segs) == 0 {
		if err := s.newSegment(1); err != nil {
			return nil, err
		}
	} else {
		last := s.segs[len(s.segs)-1]
		f, err := os.OpenFile(segPath(dir, last.id), os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening spool segment: %w", err)
		}
		s.active = f
	}
	s.head = pos{s.segs[0].id, int64(len(segMagic))}
	if cur.seg == s.segs[0].id && cur.off >= s.head.off {
		s.head.off = cur.off
	}
	for _, seg := range s.segs {
		s.entries += seg.entries
		s.bytes += seg.bytes
	}
	s.ev.depth(s.entries, s.bytes)
	return s, nil
}

// recover scans a segment, truncating a torn or corrupt tail, and counts
// the records at or after cur (when cur is in this segment).
func (s *spool) recover(id uint64, cur pos) (*segment, error) {
	p := segPath(s.dir, id)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading spool segment: %w", err)
	}
	seg := &segment{id: id, size: int64(len(segMagic))}
	if !bytes.HasPrefix(data, []byte(segMagic)) {
		s.ev.dropped("corrupt", 1)
		return seg, rewriteSegment(p)
	}
	off, boundary := int64(len(segMagic)), cur.seg != id
	for {
		rec, n, ok := parseRecord(data[off:])
		if !ok {
			break
		}
		_ = rec
		if cur.seg != id || off >= cur.off {
			seg.entries++
			seg.bytes += int64(n)
		}
		if off == cur.off {
			boundary = true
		}
		off += int64(n)
	}
	if off == cur.off {
		boundary = true
	}
	if !boundary { // the cursor is not on a record: deliver the segment again
		return s.recover(id, pos{})
	}
	if off < int64(len(data)) {
		s.ev.dropped("corrupt", 1)
		if err := os.Truncate(p, off); err != nil {
			return nil, fmt.Errorf("truncating spool segment: %w", err)
		}
	}
	seg.size = off
	return seg, nil
}

func rewriteSegment(p string) error {
	if err := os.WriteFile(p, []byte(segMagic), 0o600); err != nil {
		return fmt.Errorf("rewriting spool segment: %w", err)
	}
	return nil
}

func writeCursor(dir string, p pos) error {
	tmp := filepath.Join(dir, cursorFile+".tmp")
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", p.seg, p.off), 0o600); err != nil {
		return fmt.Errorf("writing spool cursor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, cursorFile)); err != nil {
		return fmt.Errorf("writing spool cursor: %w", err)
	}
	return nil
}

func readCursor(dir string) (pos, error) {
	b, err := os.ReadFile(filepath.Join(dir, cursorFile))
	if err != nil {
		return pos{}, err
	}
	return parseCursor(b)
}

// parseCursor reads "SEGMENT OFFSET\n".
func parseCursor(b []byte) (pos, error) {
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return pos{}, errors.New("malformed spool cursor")
	}
	seg, err1 := strconv.ParseUint(f[0], 10, 64)
	off, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || off < int64(len(segMagic)) {
		return pos{}, errors.New("malformed spool cursor")
	}
	return pos{seg, off}, nil
}
