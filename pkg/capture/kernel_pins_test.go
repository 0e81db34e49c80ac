package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

// testLayoutBuild is the same programs as b with another struct lineage (a
// field before the key slots), compiled by gen.go with -DTEST_LAYOUT.
func testLayoutBuild(b build) build {
	if b.name == compatBuild().name {
		return build{name: "correlator-compat-test-layout", obj: _CorrelatorTestLayoutCompatBytes}
	}
	return build{name: "correlator-test-layout", obj: _CorrelatorTestLayoutBytes}
}

// buildDirs lists the build directories under the pin path.
func buildDirs(t *testing.T, pinPath string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(pinPath, buildDirPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestKernelPinnedWindow: the agent stops, the probes do not. A session
// started while no agent runs is read from the pinned ring by the next
// agent, which adopts the pinned links and reports how long nothing read.
func TestKernelPinnedWindow(t *testing.T) {
	testutil.RequireRoot(t)
	cfg := Default()
	cfg.PinPath = testPinPath(t)
	first := startHarness(t, cfg)
	first.stop()

	id := testutil.RandomUUID()
	tok := "window-" + id[:8]
	run(t, []string{"/bin/sh", "-c", "/bin/echo " + tok + "; true"}, []string{keyEnv(id), "PATH=/bin"})

	second := startHarness(t, cfg)
	if !second.p.adopt || !second.p.Resumed() {
		t.Fatalf("restart did not adopt the pinned probes (adopt %v resumed %v)", second.p.adopt, second.p.Resumed())
	}
	w := second.p.Window()
	if !w.Found || w.Unread <= 0 || w.Orphaned {
		t.Errorf("window %+v, want found, positive, not orphaned", w)
	}
	ev := second.waitFor("echo run while no agent read", func(e Event) bool { return execWithArg(tok)(e) && e.Filename == "/bin/echo" })
	if ev.AuditID != id || ev.Source != vocab.SourceInherited {
		t.Errorf("window echo: auditID %q source %q, want %s inherited", ev.AuditID, ev.Source, id)
	}
	noFlags(t, ev, vocab.FlagProcfsRoot)
	if dirs := buildDirs(t, cfg.PinPath); len(dirs) != 1 {
		t.Errorf("build directories %v, want one", dirs)
	}

	// Removal: everything pinned goes, and the probes stop once the last
	// agent holding them exits.
	second.stop()
	r, err := Remove(cfg.PinPath)
	if err != nil || r.Links != 3 || r.Builds != 1 {
		t.Fatalf("removing pins: %+v %v, want 3 links of one build", r, err)
	}
	if _, err := os.Stat(cfg.PinPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin path still there after removal: %v", err)
	}
}

// TestKernelHandover: a session lives across an upgrade to a build whose
// lineage layout differs and a rollback to the first. Each build attaches
// before the other detaches, copies the lineage into its layout, and
// removes the other's pins; a child forked after each handover inherits the
// session.
func TestKernelHandover(t *testing.T) {
	testutil.RequireRoot(t)
	cfg := Default()
	cfg.PinPath = testPinPath(t)
	id := testutil.RandomUUID()
	tok := id[:8]
	g1, release1 := gate(t)
	g2, release2 := gate(t)
	script := "read x < " + g1 + "; /bin/echo upgraded-" + tok + "; read x < " + g2 + "; /bin/echo rolledback-" + tok
	shipped := testBuild(t)
	first := startBuild(t, cfg, shipped)
	root, wait := spawn(t, []string{"/bin/sh", "-c", script}, []string{keyEnv(id), "PATH=/bin"})
	rootEv := first.waitFor("session root", execOf(root))
	first.stop()

	steps := []struct {
		name string
		b    build
		rel  func()
		tok  string
	}{
		{"upgrade", testLayoutBuild(shipped), release1, "upgraded-" + tok},
		{"rollback", shipped, release2, "rolledback-" + tok},
	}
	for _, st := range steps {
		before := buildDirs(t, cfg.PinPath)
		h := startBuild(t, cfg, st.b)
		hs := h.p.Handover()
		if hs.Builds != 1 || hs.Copied == 0 || hs.Detached != 3 {
			t.Fatalf("%s: handover %+v, want one build retired, lineage copied, 3 links detached", st.name, hs)
		}
		after := buildDirs(t, cfg.PinPath)
		if len(after) != 1 || len(before) != 1 || after[0] == before[0] {
			t.Fatalf("%s: build directories %v before, %v after: want the old one replaced", st.name, before, after)
		}
		checkCopied(t, h.p, uint32(root), id)
		st.rel()
		ev := h.waitFor(st.name+" child", func(e Event) bool { return execWithArg(st.tok)(e) && e.Filename == "/bin/echo" })
		if ev.AuditID != id || ev.Source != vocab.SourceInherited || ev.SessionRootID != rootEv.ProcessID {
			t.Errorf("%s: child auditID %q source %q root %q, want %s inherited from %s", st.name, ev.AuditID, ev.Source, ev.SessionRootID, id, rootEv.ProcessID)
		}
		noFlags(t, ev, vocab.FlagProcfsRoot, vocab.FlagStaleLineage)
		h.stop()
	}
	wait()
}

// checkCopied reads the root's entry in the new map through its BTF (as
// the shipped layout) and checks the ID landed in the first key slot.
func checkCopied(t *testing.T, p *Probe, tgid uint32, id string) {
	t.Helper()
	raw := make([]byte, p.objs.LineageMap.ValueSize())
	if err := p.objs.LineageMap.Lookup(tgid, &raw); err != nil {
		t.Fatalf("looking up the root's copied entry: %v", err)
	}
	have, err := mapStruct(p.objs.LineageMap, "lineage")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := loadCorrelator()
	if err != nil {
		t.Fatal(err)
	}
	var ours correlatorLineage
	out := make([]byte, binary.Size(&ours))
	copyByName(out, spec.Maps["lineage_map"].Value, raw, have)
	if err := binary.Read(bytes.NewReader(out), binary.LittleEndian, &ours); err != nil {
		t.Fatal(err)
	}
	got := string(ours.Ids[0].Value[:ours.Ids[0].Len])
	if got != id || ours.RootTgid != tgid {
		t.Errorf("copied entry: id %q root %d, want %s root %d", got, ours.RootTgid, id, tgid)
	}
}
