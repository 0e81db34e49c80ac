// Package authn owns the agent's bearer-token files (parsing, the
// permission and length policy, reloading on rotation, constant-time
// checks) and the rule for listeners without authentication: loopback only.
package authn

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// DefaultMinLength is the shortest token the agent accepts.
const DefaultMinLength = 16

// rereadEvery re-reads an unchanged-looking file now and then, in case an
// in-place rewrite kept its size within one mtime tick.
const rereadEvery = time.Minute

// Sentinel errors for a token file the policy refuses.
var (
	ErrNoTokens      = errors.New("no tokens in it")
	ErrTokenTooShort = errors.New("token too short")
	ErrTokenSpace    = errors.New("token contains whitespace")
	ErrUnsafeMode    = errors.New("writable by group or others")
	// ErrInsecureListener: a listener without authentication that is
	// reachable from other hosts.
	ErrInsecureListener = errors.New("a listener without authentication must be a loopback address")
)

// Config is the token-file policy.
type Config struct {
	// MinLength refuses shorter tokens; <= 0 accepts any non-empty token.
	MinLength int
	// CheckMode refuses a file writable by group or others and warns when
	// it is readable by others.
	CheckMode bool
	// Interval is the least time between two looks at the file (a stat;
	// it is re-read only when it changed); 0 looks on every use.
	Interval time.Duration
}

// Default is the agent's policy: 16 characters, safe mode, a look a second.
func Default() Config {
	return Config{MinLength: DefaultMinLength, CheckMode: true, Interval: time.Second}
}

// ParseTokens reads a token file: one token a line; blank lines and lines
// starting with # are skipped. Errors name the line, never the token.
func ParseTokens(b []byte, minLength int) ([]string, error) {
	var out []string
	for i, line := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(line)
		switch {
		case s == "" || strings.HasPrefix(s, "#"):
			continue
		case strings.ContainsAny(s, " \t\v\f"):
			return nil, fmt.Errorf("line %d: %w", i+1, ErrTokenSpace)
		case minLength > 0 && len(s) < minLength:
			return nil, fmt.Errorf("line %d: %w (%d characters, want at least %d)", i+1, ErrTokenTooShort, len(s), minLength)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, ErrNoTokens
	}
	return out, nil
}

// CheckMode refuses permissions that let another user replace the tokens
// (group- or world-writable); worldReadable asks the caller to warn.
func CheckMode(mode fs.FileMode) (worldReadable bool, err error) {
	if perm := mode.Perm(); perm&0o022 != 0 {
		return false, fmt.Errorf("mode %04o: %w", perm, ErrUnsafeMode)
	}
	return mode.Perm()&0o004 != 0, nil
}

// IsLoopback reports whether addr (host:port) listens only on loopback,
// the one place a listener may go without authentication.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Checker accepts or refuses a presented bearer token.
type Checker interface {
	Accepts(token string) bool
}

// File is a token file that follows rotation: on use, at most once per
// Interval, it is stat'ed and re-read if its identity (a Kubernetes Secret
// swaps the symlinked file), size or mtime changed, and at least once a
// minute. A file that turns invalid (missing, empty, unsafe) refuses
// every token until it is fixed: a revocation never falls back to the old
// tokens. Tokens are kept as SHA-256 hashes and never logged.
type File struct {
	path string
	cfg  Config
	log  zerolog.Logger
	now  func() time.Time

	mu      sync.Mutex
	checked time.Time
	loaded  time.Time
	info    os.FileInfo
	hashes  [][32]byte
	err     error
}

// Open reads path under cfg; a file the policy refuses is an error.
func Open(path string, cfg Config, log zerolog.Logger) (*File, error) {
	f := &File{path: path, cfg: cfg, now: time.Now,
		log: log.With().Str("component", "authn.tokens").Str("path", path).Logger()}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	if f.err != nil {
		return nil, f.err
	}
	return f, nil
}

// Path is the file's path, for messages.
func (f *File) Path() string { return f.path }

// refresh looks at the file (f.mu held).
func (f *File) refresh() {
	now := f.now()
	if f.info != nil && f.cfg.Interval > 0 && now.Sub(f.checked) < f.cfg.Interval {
		return
	}
	f.checked = now
	st, err := os.Stat(f.path)
	if err != nil {
		f.fail(fmt.Errorf("reading token file %s: %w", f.path, err))
		return
	}
	if f.err == nil && f.info != nil && os.SameFile(st, f.info) && st.Size() == f.info.Size() &&
		st.ModTime().Equal(f.info.ModTime()) && now.Sub(f.loaded) < rereadEvery {
		return
	}
	hs, err := f.load(st)
	if err != nil {
		f.fail(err)
		return
	}
	if f.info != nil {
		f.log.Info().Int("tokens", len(hs)).Msg("token file reloaded")
	}
	f.info, f.hashes, f.err, f.loaded = st, hs, nil, now
}

func (f *File) fail(err error) {
	if f.err == nil || f.err.Error() != err.Error() {
		f.log.Error().Err(err).Msg("token file refused: every token is refused until it is fixed")
	}
	f.hashes, f.err = nil, err
}

func (f *File) load(st os.FileInfo) ([][32]byte, error) {
	if f.cfg.CheckMode {
		worldReadable, err := CheckMode(st.Mode())
		if err != nil {
			return nil, fmt.Errorf("checking token file %s: %w (chmod 600 it)", f.path, err)
		}
		if worldReadable {
			f.log.Warn().Str("mode", fmt.Sprintf("%04o", st.Mode().Perm())).Msg("token file is readable by every user: chmod 600 it")
		}
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("reading token file %s: %w", f.path, err)
	}
	toks, err := ParseTokens(b, f.cfg.MinLength)
	if err != nil {
		return nil, fmt.Errorf("parsing token file %s: %w", f.path, err)
	}
	hs := make([][32]byte, len(toks))
	for i, t := range toks {
		hs[i] = sha256.Sum256([]byte(t))
	}
	return hs, nil
}

// current returns the hashes in force, or why there are none.
func (f *File) current() ([][32]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	return f.hashes, f.err
}

// Err is the file's current trouble, nil when its tokens are in force.
func (f *File) Err() error {
	_, err := f.current()
	return err
}

// Accepts reports whether token is any token of the file.
func (f *File) Accepts(token string) bool {
	hs, _ := f.current()
	return match(hs, token)
}

// First is a Checker that accepts the file's first token only (the audit
// webhook's sender on the API listener, whose other tokens are readers').
func (f *File) First() Checker { return firstToken{f} }

type firstToken struct{ f *File }

func (c firstToken) Accepts(token string) bool {
	hs, _ := c.f.current()
	if len(hs) == 0 {
		return false
	}
	return match(hs[:1], token)
}

// match compares hashes in constant time.
func match(hs [][32]byte, token string) bool {
	if token == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	ok := 0
	for _, want := range hs {
		ok |= subtle.ConstantTimeCompare(h[:], want[:])
	}
	return ok == 1
}

// FirstToken reads the first token of a client's secret file (an
// Elasticsearch API key, a sink's token), parsed like every token file.
// Secrets the agent presents are not its own to police, so no length or
// mode policy applies; errors never carry the secret.
func FirstToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading token file: %w", err)
	}
	toks, err := ParseTokens(b, 0)
	if err != nil {
		return "", fmt.Errorf("reading token file %s: %w", path, err)
	}
	return toks[0], nil
}
