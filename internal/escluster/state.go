package escluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// state is the state file: what the cluster in the state directory was
// started as, so a different configuration is recognised and replaced.
type state struct {
	Version       string   `json:"version"`
	URLs          []string `json:"urls"`
	Nodes         int      `json:"nodes"`
	HTTPPort      int      `json:"http_port"`
	TransportPort int      `json:"transport_port"`
	Heap          string   `json:"heap"`
	Distribution  string   `json:"distribution"`
}

const stateFile = "state.json"

func wantState(cfg Config) state {
	return state{Version: Version, URLs: cfg.urls(), Nodes: cfg.Nodes, HTTPPort: cfg.HTTPPort,
		TransportPort: cfg.TransportPort, Heap: cfg.Heap, Distribution: cfg.distDir()}
}

func readState(dir string) (state, error) {
	var s state
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("decoding %s: %w", filepath.Join(dir, stateFile), err)
	}
	return s, nil
}

// ours reports whether dir holds nothing but a state file and node
// directories, so that replacing it cannot remove anything else.
func ours(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		name := e.Name()
		if name == stateFile || (e.IsDir() && len(name) > 1 && name[0] == 'n' && strings.Trim(name[1:], "0123456789") == "") {
			continue
		}
		return false, nil
	}
	return true, nil
}

// compatible reports whether the cluster of state s can serve cfg: the same
// Elasticsearch, node count and distribution; ports and heap may differ.
func compatible(s state, cfg Config) bool {
	return s.Version == Version && s.Nodes == cfg.Nodes && s.Distribution == cfg.distDir() &&
		len(s.URLs) == s.Nodes && s.HTTPPort > 0 && s.TransportPort > 0 && s.Heap != ""
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// lockFile takes an exclusive flock on path, polling until ctx ends; the
// returned func releases it. Each call opens the file anew, so two callers
// in one process exclude each other too.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("locking %s: another process holds it: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
