package auditlog

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// checkpoint is what a restarted tailer needs to neither lose nor repeat
// records: the live file's identity and the offset after the last line the
// sink accepted, the fingerprint of its start (to find its copy after a
// copytruncate), plus the rotated files already read as backlog.
type checkpoint struct {
	Path   string `json:"path"`
	Inode  uint64 `json:"inode"`
	Offset int64  `json:"offset"`
	fileHead
	Backlog []string `json:"backlogDone,omitempty"`
}

func (f *follower) checkpointPath() string {
	if f.t.cfg.CheckpointDir == "" {
		return ""
	}
	abs, err := filepath.Abs(f.path)
	if err != nil {
		abs = f.path
	}
	name := strings.NewReplacer("/", "_", "\\", "_", ":", "_").Replace(strings.TrimPrefix(abs, "/"))
	return filepath.Join(f.t.cfg.CheckpointDir, name+".checkpoint.json")
}

func loadCheckpoint(path string) (checkpoint, bool, error) {
	if path == "" {
		return checkpoint{}, false, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return checkpoint{}, false, nil
	}
	if err != nil {
		return checkpoint{}, false, fmt.Errorf("reading checkpoint: %w", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return checkpoint{}, false, fmt.Errorf("decoding checkpoint %s: %w", path, err)
	}
	return cp, true, nil
}

// saveCheckpoint writes atomically: a crash leaves the old or the new one.
func (f *follower) saveCheckpoint() error {
	path := f.checkpointPath()
	if path == "" {
		return nil
	}
	f.cp.Path = f.path
	b, err := json.Marshal(f.cp)
	if err != nil {
		return fmt.Errorf("encoding checkpoint: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing checkpoint: %w", err)
	}
	return nil
}

func openInode(path string) (*os.File, uint64, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, 0, fmt.Errorf("checking %s: %w", path, err)
	}
	return file, inodeOf(st), nil
}

func inodeOf(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

// rotatedSiblings lists rotated copies of path, oldest first: lumberjack's
// `audit-2026-01-02T03-04-05.000.log[.gz]` and logrotate's `audit.log.1[.gz]`.
func rotatedSiblings(path string) []string {
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	stem := strings.TrimSuffix(base, ext)
	var out []string
	for _, pattern := range []string{stem + "-*" + ext, stem + "-*" + ext + ".gz", base + ".*"} {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		out = append(out, m...)
	}
	type aged struct {
		name string
		mod  int64
	}
	var files []aged
	for _, name := range out {
		if name == path || strings.HasSuffix(name, ".tmp") {
			continue
		}
		if st, err := os.Stat(name); err == nil && st.Mode().IsRegular() {
			files = append(files, aged{name, st.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(files, func(a, b aged) int {
		if a.mod != b.mod {
			return int(min(max(a.mod-b.mod, -1), 1))
		}
		return strings.Compare(a.name, b.name)
	})
	names := make([]string, 0, len(files))
	for _, f := range files {
		if !slices.Contains(names, f.name) {
			names = append(names, f.name)
		}
	}
	return names
}

func findByInode(paths []string, ino uint64) string {
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && inodeOf(st) == ino && !strings.HasSuffix(p, ".gz") {
			return p
		}
	}
	return ""
}

// readBacklog reads, oldest first, the rotated files not yet done that
// precede the checkpointed file (stopIno) or the live one (liveIno): later
// files are the tail's own business (catchUp).
func (f *follower) readBacklog(ctx context.Context, stopIno, liveIno uint64) error {
	for _, name := range rotatedSiblings(f.path) {
		st, err := os.Stat(name)
		if err != nil {
			continue
		}
		if ino := inodeOf(st); (stopIno != 0 && ino == stopIno) || (liveIno != 0 && ino == liveIno) {
			break
		}
		base := filepath.Base(name)
		if slices.Contains(f.cp.Backlog, base) {
			continue
		}
		if err := f.readRotated(ctx, name, 0); err != nil {
			return err
		}
		f.cp.Backlog = append(f.cp.Backlog, base)
		if err := f.saveCheckpoint(); err != nil {
			return err
		}
	}
	return nil
}

// readRotated reads a rotated (possibly gzip'd) file from off to its end.
func (f *follower) readRotated(ctx context.Context, name string, off int64) error {
	file, err := os.Open(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // aged out meanwhile
		}
		return fmt.Errorf("opening rotated audit log: %w", err)
	}
	defer file.Close()
	var r io.Reader = file
	if strings.HasSuffix(name, ".gz") {
		gz, err := gzip.NewReader(file)
		if err != nil {
			f.log.Warn().Err(err).Str("file", name).Msg("skipping unreadable rotated file")
			return nil
		}
		defer gz.Close()
		r = gz
	} else if _, err := file.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("seeking rotated audit log: %w", err)
	}
	f.log.Info().Str("file", name).Int64("offset", off).Msg("reading rotated audit log")
	_, err = f.readLines(ctx, r, name, true)
	return err
}

// readLines hands the lines of r to the sink in batches, without
// checkpoints. A last line without newline is parsed if keepPartial, else
// only reported (partial).
func (f *follower) readLines(ctx context.Context, r io.Reader, name string, keepPartial bool) (partial bool, err error) {
	lr := newLineReader(bufio.NewReaderSize(r, readBufferSize), f.t.cfg.MaxLineBytes)
	for {
		var batch []Event
		lines := 0
		for ; lines < f.t.cfg.BatchLines; lines++ {
			line, complete, tooLarge, err := lr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				f.log.Warn().Err(err).Str("file", name).Msg("stopping at unreadable data in rotated file")
				break
			}
			if !complete {
				partial = true
				if !keepPartial {
					break // the last line: nothing follows it
				}
			}
			if tooLarge {
				f.p.SkipTooLarge()
			} else {
				batch = append(batch, f.p.ParseLine(line)...)
			}
			f.acc.done(lr.lines)
		}
		if len(batch) > 0 {
			if err := f.deliverBacklog(ctx, batch); err != nil {
				return partial, err
			}
		}
		if lines < f.t.cfg.BatchLines {
			return partial, nil
		}
	}
}
