package authn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestTokenFilePolicy: the agent refuses short tokens and unsafe modes.
func TestTokenFilePolicy(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body string
		mode os.FileMode
		want error
	}{
		"short":          {"file-token\n", 0o600, ErrTokenTooShort},
		"world writable": {"0123456789abcdef\n", 0o666, ErrUnsafeMode},
		"good":           {"0123456789abcdef\n", 0o600, nil},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(path, []byte(tc.body), tc.mode)
		os.Chmod(path, tc.mode)
		if _, err := NewFiles(zerolog.Nop()).Open(path); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// TestFilesShared: the same path opened twice is one source.
func TestFilesShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := NewFiles(zerolog.Nop())
	tf, err := files.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := files.Open(path); again != tf {
		t.Fatal("the same file opened twice is two sources")
	}
}
