package delivery

import (
	"fmt"
	"os"
	"path/filepath"
)

func segPath(dir string, id uint64) string {
	return filepath.Join(dir, fmt.Sprintf("seg-%020d.log", id))
}

// newSegment starts the next segment and makes it the active one. On an
// error no file is left behind.
func (s *spool) newSegment() error {
	id := s.nextID
	p := segPath(s.dir, id)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating spool segment: %w", diskFull(err))
	}
	if _, err = f.Write([]byte(segMagic)); err == nil {
		err = syncDir(s.dir) // or a crash could lose the file with its records
	}
	if err != nil {
		f.Close()
		_ = os.Remove(p)
		return fmt.Errorf("creating spool segment: %w", diskFull(err))
	}
	s.nextID = id + 1
	s.active = f
	s.segs = append(s.segs, &segment{id: id, size: int64(len(segMagic))})
	if len(s.segs) == 1 {
		s.head = pos{id, int64(len(segMagic))}
	}
	return nil
}

// seal syncs and closes the active segment; the next append starts another.
func (s *spool) seal() error {
	if s.active == nil {
		return nil
	}
	f := s.active
	s.active = nil
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing spool segment: %w", err)
	}
	return nil
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

// dropOldest drops the oldest segment's undelivered records; it must not
// be the active one.
func (s *spool) dropOldest() {
	old := s.segs[0]
	s.entries -= old.entries
	s.bytes -= old.bytes
	s.ev.dropped("overflow", old.entries)
	s.removeFirst()
}

// advance deletes fully read segments that are no longer appended to,
// moving the head to the next one.
func (s *spool) advance() {
	for len(s.segs) > 0 && s.head.off >= s.segs[0].size && (len(s.segs) > 1 || s.active == nil) {
		s.removeFirst()
	}
}

// removeFirst deletes the oldest segment. Its reader is closed first: an
// open descriptor would keep the space of the deleted file in use. A file
// that cannot be removed only takes space: a later start deletes it once
// the cursor is past it.
func (s *spool) removeFirst() {
	old := s.segs[0]
	if s.rfile != nil && s.rseg == old.id {
		s.rfile.Close()
		s.rfile = nil
	}
	_ = os.Remove(segPath(s.dir, old.id))
	s.segs = s.segs[1:]
	if len(s.segs) > 0 {
		s.head = pos{s.segs[0].id, int64(len(segMagic))}
	} else {
		s.head = pos{s.nextID, int64(len(segMagic))}
	}
}
