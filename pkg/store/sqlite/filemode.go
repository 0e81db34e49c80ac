package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"
)

// The database holds every process's argv and environment captures, which
// carry tokens and passwords: only the agent's user may read it.
const (
	// fileMode is the mode of the database and its -wal and -shm files.
	// SQLite gives the -wal and -shm files the database file's mode, so
	// creating the database 0600 keeps them 0600 too.
	fileMode fs.FileMode = 0o600
	// dirMode is the mode of a directory the store creates for its file.
	dirMode fs.FileMode = 0o700
)

// secureFiles prepares path before SQLite opens it: it creates a missing
// directory 0700 (when its own parent exists) and a missing database file
// 0600, and tightens an
// existing database, -wal or -shm file that group or others can access to
// 0600, logging a warning for each. A file that cannot be tightened refuses
// the open rather than keep the records readable.
func secureFiles(path string, log zerolog.Logger) error {
	// Only the file's own directory is created: a longer missing chain is
	// more likely a volume that was not mounted than a new install.
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating store directory %s: %w", dir, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	switch {
	case err == nil:
		if err := f.Close(); err != nil {
			return fmt.Errorf("creating store file %s: %w", path, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("creating store file %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := tighten(p, log); err != nil {
			return err
		}
	}
	return nil
}

// tighten chmods p to 0600 when group or others have any access to it; a
// missing p is left alone.
func tighten(p string, log zerolog.Logger) error {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking mode of store file %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("checking mode of store file %s: not a regular file", p)
	}
	mode := st.Mode().Perm()
	if mode&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(p, mode&fileMode); err != nil {
		return fmt.Errorf("tightening mode of store file %s from %s: %w", p, mode, err)
	}
	log.Warn().Str("path", p).Str("was", mode.String()).Str("now", (mode & fileMode).String()).
		Msg("store file was readable by group or others; tightened")
	return nil
}
