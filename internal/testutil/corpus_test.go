package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// outcome records what a testing.TB was told, stopping the goroutine on
// Skip and Fatal as the real one does.
type outcome struct {
	testing.TB
	skipped, failed string
}

func (o *outcome) Helper() {}

func (o *outcome) Skip(args ...any) { o.stop(&o.skipped, fmt.Sprint(args...)) }

func (o *outcome) Skipf(format string, a ...any) { o.stop(&o.skipped, fmt.Sprintf(format, a...)) }

func (o *outcome) Fatal(args ...any) { o.stop(&o.failed, fmt.Sprint(args...)) }

func (o *outcome) Fatalf(format string, a ...any) { o.stop(&o.failed, fmt.Sprintf(format, a...)) }

func (o *outcome) stop(into *string, msg string) {
	*into = msg
	runtime.Goexit()
}

// lookup runs auditCorpus on its own goroutine, which Skip and Fatal end.
func lookup(t *testing.T, l corpusLookup) (string, *outcome) {
	t.Helper()
	o := &outcome{TB: t}
	var dir string
	done := make(chan struct{})
	go func() {
		defer close(done)
		dir = auditCorpus(o, l)
	}()
	<-done
	return dir, o
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	dir := filepath.Join(parts...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAuditCorpusLookup: the variable wins over a corpus beside the
// checkout, which wins over the fallback; missing everywhere, the skip
// names every path tried and the variable, and CI turns it into a failure.
// The walk up stops at the temporary directory (top), so a corpus the
// machine keeps above it (/work/shared/corpora above a TMPDIR under /work)
// changes nothing.
func TestAuditCorpusLookup(t *testing.T) {
	tmp := t.TempDir()
	proj := mkdir(t, tmp, "work", "proj")
	if err := os.WriteFile(filepath.Join(proj, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wd := mkdir(t, proj, "pkg", "auditlog")
	envCorpora := filepath.Join(tmp, "env", "corpora")
	envAudit := mkdir(t, envCorpora, "audit")
	fallback := filepath.Join(tmp, "fallback", "corpora")
	fallbackAudit := mkdir(t, fallback, "audit")
	beside := filepath.Join(tmp, "work", "shared", "corpora", "audit") // ../shared from proj

	t.Run("variable wins", func(t *testing.T) {
		mkdir(t, beside)
		defer os.RemoveAll(filepath.Join(tmp, "work", "shared"))
		if dir, o := lookup(t, corpusLookup{env: envCorpora, wd: wd, top: tmp, fallback: fallback}); dir != envAudit || o.skipped+o.failed != "" {
			t.Fatalf("got %q (%q%q), want %q", dir, o.skipped, o.failed, envAudit)
		}
	})
	t.Run("variable set wrong fails", func(t *testing.T) {
		wrong := filepath.Join(tmp, "nowhere")
		_, o := lookup(t, corpusLookup{env: wrong, wd: wd, top: tmp, fallback: fallback})
		if !strings.Contains(o.failed, CorporaEnv+"="+wrong) || o.skipped != "" {
			t.Fatalf("failed %q skipped %q, want a failure naming %s", o.failed, o.skipped, CorporaEnv)
		}
	})
	t.Run("beside the checkout", func(t *testing.T) {
		mkdir(t, beside)
		defer os.RemoveAll(filepath.Join(tmp, "work", "shared"))
		if dir, o := lookup(t, corpusLookup{wd: wd, top: tmp, fallback: fallback}); dir != beside {
			t.Fatalf("got %q (%q%q), want %q", dir, o.skipped, o.failed, beside)
		}
	})
	t.Run("fallback last", func(t *testing.T) {
		if dir, o := lookup(t, corpusLookup{wd: wd, top: tmp, fallback: fallback}); dir != fallbackAudit {
			t.Fatalf("got %q (%q%q), want %q", dir, o.skipped, o.failed, fallbackAudit)
		}
	})
	missing := corpusLookup{wd: wd, top: tmp, fallback: filepath.Join(tmp, "no-fallback")}
	wantTried := []string{
		filepath.Join(proj, "shared", "corpora", "audit"), // the module root, not the package
		beside,
		filepath.Join(tmp, "shared", "corpora", "audit"),
		filepath.Join(tmp, "no-fallback", "audit"),
		CorporaEnv + "=",
	}
	t.Run("missing skips, naming what it tried", func(t *testing.T) {
		_, o := lookup(t, missing)
		if o.skipped == "" || o.failed != "" {
			t.Fatalf("skipped %q failed %q, want a skip", o.skipped, o.failed)
		}
		for _, w := range wantTried {
			if !strings.Contains(o.skipped, w) {
				t.Errorf("skip message lacks %q:\n%s", w, o.skipped)
			}
		}
		if strings.Contains(o.skipped, filepath.Join(wd, "shared")) {
			t.Errorf("looked under the package directory, not the module root:\n%s", o.skipped)
		}
	})
	t.Run("nothing above top", func(t *testing.T) {
		// A corpus above top, as the machine's own may be, is never tried.
		above := corpusLookup{wd: wd, top: filepath.Join(tmp, "work"), fallback: filepath.Join(tmp, "no-fallback")}
		mkdir(t, tmp, "shared", "corpora", "audit")
		defer os.RemoveAll(filepath.Join(tmp, "shared"))
		if dir, o := lookup(t, above); dir != "" || o.skipped == "" || strings.Contains(o.skipped, filepath.Join(tmp, "shared")) {
			t.Fatalf("got %q (skipped %q, failed %q), want a skip that never looked above %s", dir, o.skipped, o.failed, above.top)
		}
	})
	t.Run("missing under CI fails", func(t *testing.T) {
		missing.ci = true
		_, o := lookup(t, missing)
		if o.failed == "" || o.skipped != "" || !strings.Contains(o.failed, beside) {
			t.Fatalf("failed %q skipped %q, want a failure naming the paths", o.failed, o.skipped)
		}
	})
}

func TestAncestors(t *testing.T) {
	for _, tc := range []struct {
		dir, top string
		want     []string
	}{
		{"/a/b/c", "/a", []string{"/a/b/c", "/a/b", "/a"}},
		{"/a/b/c/", "/a/b/", []string{"/a/b/c", "/a/b"}},
		{"/a/b", "", []string{"/a/b", "/a", "/"}},
		{"/a/b", "/x", []string{"/a/b", "/a", "/"}}, // top not above dir: the root
		{"/a", "/a", []string{"/a"}},
	} {
		if got := ancestors(tc.dir, tc.top); !slices.Equal(got, tc.want) {
			t.Errorf("ancestors(%q, %q) = %q, want %q", tc.dir, tc.top, got, tc.want)
		}
	}
}
