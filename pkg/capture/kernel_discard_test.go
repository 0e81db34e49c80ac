package capture

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
)

// pinTree lists everything under dir, relative to it.
func pinTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, path); rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing %s: %v", dir, err)
	}
	return out
}

// TestKernelDiscardFailedStart: a start that fails before its probes attach
// (Discard) removes the pins it made, so a first start leaves nothing under
// the pin path, not even the directories it created; pins it found, probes
// an earlier start left watching, stay as they were. A pin path off bpffs
// is refused before anything is created.
func TestKernelDiscardFailedStart(t *testing.T) {
	testutil.RequireRoot(t)
	b := testBuild(t)
	log := zerolog.New(zerolog.NewTestWriter(t))
	root := testPinPath(t)
	cfg := Default()
	cfg.PinPath = filepath.Join(root, "nested", "pins")

	t.Run("a first start leaves nothing", func(t *testing.T) {
		p, err := load(cfg, log, b)
		if err != nil {
			t.Fatalf("loading: %v", err)
		}
		if got := pinTree(t, root); !slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "/lineage_map") }) {
			t.Fatalf("loaded, pinned %v: want the build's maps (the control)", got)
		}
		if err := p.Discard(); err != nil {
			t.Fatalf("discarding: %v", err)
		}
		if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Discard, %s: %v (%v), want gone", root, err, pinTree(t, root))
		}
	})

	t.Run("a restart leaves the pins it found", func(t *testing.T) {
		startBuild(t, cfg, b).stop()
		before := pinTree(t, root)
		if !slices.ContainsFunc(before, func(s string) bool { return strings.HasSuffix(s, "/link_exec") }) {
			t.Fatalf("after a start, pinned %v: want its links", before)
		}
		p, err := load(cfg, log, b)
		if err != nil {
			t.Fatalf("loading again: %v", err)
		}
		if !p.adopt {
			t.Fatal("the second load did not adopt the pinned probes")
		}
		if err := p.Discard(); err != nil {
			t.Fatalf("discarding: %v", err)
		}
		if after := pinTree(t, root); !slices.Equal(after, before) {
			t.Errorf("after Discard, pinned %v, want as found: %v", after, before)
		}
	})

	t.Run("a pin path off bpffs", func(t *testing.T) {
		off := Default()
		off.PinPath = filepath.Join(t.TempDir(), "pins")
		_, err := load(off, log, b)
		if err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") || !strings.Contains(err.Error(), off.PinPath) {
			t.Fatalf("loading with %s: %v, want a refusal naming it", off.PinPath, err)
		}
		if _, err := os.Stat(off.PinPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after the refusal, %s: %v, want never created", off.PinPath, err)
		}
	})
}
