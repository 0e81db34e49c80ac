//go:build unix

package sqlite

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/rs/zerolog"
)

func wantMode(t *testing.T, p string, want fs.FileMode) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s mode = %s, want %s", filepath.Base(p), got, want)
	}
}

// TestFileModes opens a new store in a directory it has to create, under a
// permissive umask, and checks the directory, the database and its -wal
// and -shm files after Open and after a write.
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "correlator")
	path := filepath.Join(dir, "store.db")
	s := openAt(t, path)
	wantMode(t, dir, dirMode)
	wantMode(t, path, fileMode)
	ss := session("audit-secret", "alice", 0)
	p := process("p1", "audit-secret", 0)
	p.Argv = []string{"curl", "-H", "Authorization: Bearer hunter2"}
	if err := s.Write(context.Background(), store.Batch{Sessions: []join.Session{ss}, Processes: []join.Process{p}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, f, fileMode)
	}
}

// TestFileModesTightenExisting opens a store whose files were left
// world-readable by an older build: Open tightens each to 0600 and logs it.
func TestFileModesTightenExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := openAt(t, path)
	if err := s.Write(context.Background(), store.Batch{Sessions: []join.Session{session("a", "alice", 0)}}); err != nil {
		t.Fatal(err)
	}
	// A second store on the file keeps -wal and -shm in place when this
	// one closes, as a crashed agent would leave them.
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	s2, err := Open(path, Config{}, zerolog.New(&logs))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s2.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, f, fileMode)
	}
	if n := strings.Count(logs.String(), "tightened"); n != 3 {
		t.Errorf("logged %d tightenings, want 3:\n%s", n, logs.String())
	}
	if _, err := s2.GetSession(context.Background(), "a"); err != nil {
		t.Errorf("reading after tightening: %v", err)
	}
}

// TestFileModesKeepsExistingDirectory creates the files 0600 in a
// directory the store did not create, and leaves that directory as it is.
func TestFileModesKeepsExistingDirectory(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "store.db")
	s := openAt(t, path)
	if err := s.Write(context.Background(), store.Batch{Sessions: []join.Session{session("a", "alice", 0)}}); err != nil {
		t.Fatal(err)
	}
	wantMode(t, dir, 0o755)
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, f, fileMode)
	}
}
