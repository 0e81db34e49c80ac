package auditlog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Gap reasons: where the tailer knows records may be missing. They label
// correlator_audit_tail_gaps_total.
const (
	// Truncated (copytruncate), and no plain sibling starts with the bytes
	// read from the file and holds at least as many: the copy is gone,
	// already compressed, or older than the last read.
	gapNoCopy = "copytruncate_no_copy"
	// The copy ends inside a line: the rest of that line was written after
	// the copy and truncated away with it.
	gapPartialLine = "copytruncate_partial_line"
	// Rotated away while the tailer was stopped, then removed or compressed:
	// what was appended to it after the checkpoint is not read.
	gapRotatedGone = "rotated_file_gone"
)

var gapReasons = []string{gapNoCopy, gapPartialLine, gapRotatedGone}

// headBytes is how much of a file's start identifies it. Its first audit
// event is enough: no other file holds the same auditID and timestamps.
const headBytes = 4 << 10

// fileHead fingerprints the first Len bytes of a file. logrotate's copy
// starts with the same bytes as the file it copied; an older copy does not.
type fileHead struct {
	Len int64  `json:"headLen,omitempty"`
	Sum string `json:"headSHA256,omitempty"` // hex SHA-256 of those bytes
}

// readHead fingerprints the first n bytes of r; ok is false when r holds
// fewer.
func readHead(r io.ReaderAt, n int64) (fileHead, bool) {
	b := make([]byte, n)
	if _, err := r.ReadAt(b, 0); err != nil {
		return fileHead{}, false
	}
	sum := sha256.Sum256(b)
	return fileHead{Len: n, Sum: hex.EncodeToString(sum[:])}, true
}

// matches reports whether r starts with the bytes h was taken from. An
// empty h (nothing read yet, or a checkpoint from before fingerprints)
// cannot tell, and matches.
func (h fileHead) matches(r io.ReaderAt) bool {
	if h.Len == 0 {
		return true
	}
	got, ok := readHead(r, h.Len)
	return ok && got.Sum == h.Sum
}

// growHead extends the live file's fingerprint with a complete line just
// read at f.off, while the fingerprint covers all before it and is short of
// headBytes. Taking the bytes as read, not rereading the file later, keeps
// a truncation racing the sink out of it. A line too long to keep ends it.
func (f *follower) growHead(line []byte, tooLarge bool) {
	if tooLarge || f.head.Len != f.off || f.off >= headBytes || int64(len(line))+1 != f.lr.n {
		return
	}
	room := headBytes - len(f.headBuf)
	f.headBuf = append(f.headBuf, line[:min(len(line), room)]...)
	if len(f.headBuf) < headBytes {
		f.headBuf = append(f.headBuf, '\n')
	}
	sum := sha256.Sum256(f.headBuf)
	f.head = fileHead{Len: int64(len(f.headBuf)), Sum: hex.EncodeToString(sum[:])}
}

// resetHead starts the fingerprint over, for a new or truncated file.
func (f *follower) resetHead() {
	f.head, f.headBuf = fileHead{}, f.headBuf[:0]
}

// resumeHead restores, on a restart, the fingerprint of the live file's
// first off bytes, once the checkpoint's fingerprint matched them.
func (f *follower) resumeHead(off int64) {
	f.resetHead()
	b := make([]byte, min(off, headBytes))
	if _, err := f.f.ReadAt(b, 0); err != nil {
		return // no fingerprint: a truncation now goes uncounted, not wrong
	}
	f.headBuf = append(f.headBuf, b...)
	sum := sha256.Sum256(b)
	f.head = fileHead{Len: int64(len(b)), Sum: hex.EncodeToString(sum[:])}
}

// checkTruncated notices a copytruncate before each read: the file is
// shorter than what was read, or it no longer starts with the bytes read
// (written past the old offset again since the last look). It reads the
// rest from the copy and starts the file over.
func (f *follower) checkTruncated(ctx context.Context) error {
	st, err := f.f.Stat()
	if err != nil {
		return fmt.Errorf("checking %s: %w", f.path, err)
	}
	if st.Size() >= f.off && f.head.matches(f.f) {
		return nil
	}
	f.log.Info().Int64("size", st.Size()).Int64("offset", f.off).Msg("audit log truncated; reading from the start")
	if err := f.recoverTruncated(ctx, f.off, f.head); err != nil {
		return err
	}
	f.seek(0)
	f.resetHead()
	f.cp.Inode, f.cp.Offset, f.cp.fileHead = f.ino, 0, fileHead{}
	return f.saveCheckpoint()
}

// recoverTruncated reads, after a copytruncate, what the file held past off
// (the first byte not yet read) from the copy logrotate made of it, and
// counts what it cannot recover. Nothing tells how much was written between
// the copy and the truncate, unless the copy ends inside a line.
func (f *follower) recoverTruncated(ctx context.Context, off int64, h fileHead) error {
	if off == 0 {
		return nil
	}
	file, name := f.findCopy(off, h)
	if file == nil {
		f.t.metrics.gap(gapNoCopy)
		f.log.Warn().Int64("offset", off).Msg("audit log truncated and no plain copy of it found: records written after the last read are lost")
		return nil
	}
	defer file.Close()
	if _, err := file.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("seeking audit log copy %s: %w", name, err)
	}
	f.log.Info().Str("file", name).Int64("offset", off).Msg("audit log truncated; reading the rest from its copy")
	partial, err := f.readLines(ctx, file, name, false)
	if err != nil {
		return err
	}
	if partial {
		f.t.metrics.gap(gapPartialLine)
		f.log.Warn().Str("file", name).Msg("audit log copy ends inside a line: the record written across the truncation is lost")
	}
	return nil
}

// findCopy opens the plain sibling (same directory, name starting with the
// live file's) that starts with h and holds at least off bytes; the newest
// if several do. It keeps the file open so a compression that removes the
// name meanwhile does not matter.
func (f *follower) findCopy(off int64, h fileHead) (*os.File, string) {
	if h.Len == 0 {
		return nil, "" // nothing to check a candidate against
	}
	dir, base := filepath.Split(f.path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		f.log.Warn().Err(err).Msg("listing rotated audit logs")
		return nil, ""
	}
	var best *os.File
	var bestName string
	var bestMod int64
	for _, e := range entries {
		name := e.Name()
		if name == base || !strings.HasPrefix(name, base) || compressedName(name) {
			continue
		}
		path := filepath.Join(dir, name)
		file, err := os.Open(path)
		if err != nil {
			continue
		}
		st, err := file.Stat()
		if err != nil || !st.Mode().IsRegular() || inodeOf(st) == f.ino || st.Size() < off || !h.matches(file) {
			file.Close()
			continue
		}
		if best != nil && st.ModTime().UnixNano() <= bestMod {
			file.Close()
			continue
		}
		if best != nil {
			best.Close()
		}
		best, bestName, bestMod = file, path, st.ModTime().UnixNano()
	}
	return best, bestName
}

// compressedName reports names logrotate's compressors give; such a copy
// cannot be read from an offset, so it is no candidate.
func compressedName(name string) bool {
	for _, ext := range []string{".gz", ".bz2", ".xz", ".zst", ".lz4", ".lzma", ".Z", ".zip"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}
