package authn

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
)

const (
	tokA = "aaaaaaaaaaaaaaaa-first"
	tokB = "bbbbbbbbbbbbbbbb-second"
	tokC = "cccccccccccccccc-rotated"
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		min     int
		want    []string
		wantErr error
	}{
		{"comments and blanks", "# apiserver\n" + tokA + "\n\n  " + tokB + "  \r\n", 16, []string{tokA, tokB}, nil},
		{"only comments", "# nothing\n\n", 16, nil, ErrNoTokens},
		{"empty", "", 16, nil, ErrNoTokens},
		{"short token", tokA + "\nshort\n", 16, nil, ErrTokenTooShort},
		{"fifteen characters", "123456789012345", 16, nil, ErrTokenTooShort},
		{"sixteen characters", "1234567890123456", 16, []string{"1234567890123456"}, nil},
		{"no minimum", "tok", 0, []string{"tok"}, nil},
		{"space inside", "Bearer " + tokA, 16, nil, ErrTokenSpace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTokens([]byte(tt.in), tt.min)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), tokA) {
				t.Errorf("error quotes a token: %v", err)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckMode(t *testing.T) {
	tests := []struct {
		mode     fs.FileMode
		readable bool
		unsafe   bool
	}{
		{0o600, false, false}, {0o400, false, false}, {0o640, false, false},
		{0o644, true, false}, {0o444, true, false},
		{0o660, false, true}, {0o666, false, true}, {0o602, false, true},
	}
	for _, tt := range tests {
		readable, err := CheckMode(tt.mode)
		if readable != tt.readable || errors.Is(err, ErrUnsafeMode) != tt.unsafe {
			t.Errorf("CheckMode(%04o) = %v, %v; want readable=%v unsafe=%v", tt.mode, readable, err, tt.readable, tt.unsafe)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:80": true, "127.5.5.5:1": true,
		":8443": false, "0.0.0.0:8080": false, "10.0.0.1:80": false, "[::]:80": false, "bogus": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func write(t *testing.T, path, body string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // the umask applies to WriteFile
		t.Fatal(err)
	}
}

// TestFileRotation: a rewritten file and a swapped one (a Kubernetes
// Secret update) take effect; the old token is refused afterwards.
func TestFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	write(t, path, "# apiserver first\n"+tokA+"\n"+tokB+"\n", 0o600)
	cfg := Default()
	cfg.Interval = 20 * time.Millisecond
	f, err := Open(path, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if !f.Accepts(tokA) || !f.Accepts(tokB) || f.Accepts(tokC) || f.Accepts("") {
		t.Fatal("initial tokens not as written")
	}
	if first := f.First(); !first.Accepts(tokA) || first.Accepts(tokB) {
		t.Error("First accepts other than the first token")
	}
	// Rewritten in place.
	write(t, path, tokC+"\n", 0o600)
	testutil.Eventually(t, "the old token is refused", func() bool { return !f.Accepts(tokA) })
	if !f.Accepts(tokC) || f.Accepts(tokB) {
		t.Error("rotated file: new token refused or old accepted")
	}
	// Swapped by rename, same size and mtime as before.
	st, _ := os.Stat(path)
	next := filepath.Join(dir, "next")
	write(t, next, strings.Repeat("d", len(tokC))+"\n", 0o600)
	os.Chtimes(next, st.ModTime(), st.ModTime())
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the swapped file is in force", func() bool { return !f.Accepts(tokC) })
	if !f.First().Accepts(strings.Repeat("d", len(tokC))) {
		t.Error("swapped file's token refused")
	}
}

// TestFileFailsClosed: a file that turns empty, unsafe or missing refuses
// every token (a revocation never falls back), and recovers when fixed.
func TestFileFailsClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write(t, path, tokA+"\n", 0o600)
	var logs bytes.Buffer
	f, err := Open(path, Config{MinLength: 16, CheckMode: true}, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	for _, broken := range []func(){
		func() { write(t, path, "# revoked\n", 0o600) },
		func() { write(t, path, tokA+"\n", 0o666) },
		func() { os.Remove(path) },
	} {
		broken()
		testutil.Eventually(t, "the broken file refuses", func() bool { return !f.Accepts(tokA) && f.Err() != nil })
		write(t, path, tokA+"\n", 0o600)
		testutil.Eventually(t, "the fixed file accepts", func() bool { return f.Accepts(tokA) })
	}
	if strings.Contains(logs.String(), tokA) {
		t.Errorf("a token reached the log: %s", logs.String())
	}
}

func TestOpenPolicy(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		body string
		mode fs.FileMode
		want error
		warn bool
	}{
		{"good", tokA + "\n", 0o600, nil, false},
		{"short", "tok\n", 0o600, ErrTokenTooShort, false},
		{"group writable", tokA + "\n", 0o620, ErrUnsafeMode, false},
		{"world writable", tokA + "\n", 0o666, ErrUnsafeMode, false},
		{"world readable: warned", tokA + "\n", 0o644, nil, true},
		{"empty", "\n", 0o600, ErrNoTokens, false},
		{"missing", "", 0, fs.ErrNotExist, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "tok"+string(rune('a'+i)))
			if tt.mode != 0 {
				write(t, path, tt.body, tt.mode)
			}
			var logs bytes.Buffer
			_, err := Open(path, Default(), zerolog.New(&logs))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got := strings.Contains(logs.String(), "readable by every user"); got != tt.warn {
				t.Errorf("warned = %v, want %v: %s", got, tt.warn, logs.String())
			}
			if strings.Contains(logs.String(), tokA) || (err != nil && strings.Contains(err.Error(), tokA)) {
				t.Error("a token reached the log or the error")
			}
		})
	}
}
