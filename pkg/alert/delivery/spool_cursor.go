package delivery

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The cursor file holds the read position as "SEGMENT OFFSET CRC\n", the
// CRC-32C (hex) of "SEGMENT OFFSET". It is replaced by writing a temporary
// file, fsyncing it, renaming it over the cursor and fsyncing the
// directory, so a crash or a full disk leaves either the old position or
// the new one, never a torn one. A cursor that does not parse is counted
// and ignored: delivery restarts at the oldest segment (sending some
// alerts again, losing none).
const cursorFile = "cursor"

var errBadCursor = errors.New("malformed spool cursor")

func formatCursor(p pos) []byte {
	body := fmt.Sprintf("%d %d", p.seg, p.off)
	return fmt.Appendf(nil, "%s %08x\n", body, crc32.Checksum([]byte(body), crcTable))
}

func writeCursor(dir string, p pos) error {
	final := filepath.Join(dir, cursorFile)
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing spool cursor: %w", diskFull(err))
	}
	_, err = f.Write(formatCursor(p))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing spool cursor: %w", diskFull(err))
	}
	return syncDir(dir)
}

func readCursor(dir string) (pos, error) {
	b, err := os.ReadFile(filepath.Join(dir, cursorFile))
	if err != nil {
		return pos{}, fmt.Errorf("reading spool cursor: %w", err)
	}
	return parseCursor(b)
}

// parseCursor reads what formatCursor wrote; anything else, a cut-short
// file included, is an error.
func parseCursor(b []byte) (pos, error) {
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok || strings.Contains(line, "\n") {
		return pos{}, errBadCursor
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return pos{}, errBadCursor
	}
	body, sum := line[:i], line[i+1:]
	if sum != fmt.Sprintf("%08x", crc32.Checksum([]byte(body), crcTable)) {
		return pos{}, fmt.Errorf("%w: checksum mismatch", errBadCursor)
	}
	segS, offS, ok := strings.Cut(body, " ")
	if !ok {
		return pos{}, errBadCursor
	}
	seg, err1 := strconv.ParseUint(segS, 10, 64)
	off, err2 := strconv.ParseInt(offS, 10, 64)
	p := pos{seg, off}
	if err1 != nil || err2 != nil || seg == 0 || off < int64(len(segMagic)) || string(formatCursor(p)) != string(b) {
		return pos{}, errBadCursor
	}
	return p, nil
}
