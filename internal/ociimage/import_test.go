package ociimage_test

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/nodeharness"
	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
)

// TestCorrelatorIndexImport hands the two-architecture archive to a real
// container runtime, internal/nodeharness's containerd (Debian's 1.6), the
// way each kind of node takes it: `ctr images import --platform P`, which
// keeps and unpacks P's manifest only, into a namespace of its own, then
// `ctr images mount --platform P` of the one reference, whose
// /usr/local/bin/correlator must be P's binary, an ELF of P's machine. An
// arm64 node's containerd thus finds linux/arm64 in the index and unpacks
// the arm64 layer, which no CPU of this machine has to run. Needs root.
func TestCorrelatorIndexImport(t *testing.T) {
	testutil.RequireRoot(t)
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		t.Fatalf("finding ctr (Debian's containerd package): %v", err)
	}
	dir := t.TempDir()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	var bins []ociimage.Binary
	for _, arch := range []string{"amd64", "arm64"} {
		bin, err := ociimage.BuildPause(dir, arch)
		if err != nil {
			t.Fatal(err)
		}
		bins = append(bins, ociimage.Binary{Arch: arch, Path: bin})
	}
	const ref = "registry.example/execid/correlator:import"
	archive := filepath.Join(dir, "correlator.oci.tar")
	if err := ociimage.WriteCorrelatorIndex(archive, ref, bins); err != nil {
		t.Fatal(err)
	}

	n := nodeharness.Start(t, nodeharness.Options{})
	for _, b := range bins {
		platform := "linux/" + b.Arch
		ns := "ociimage-" + b.Arch
		run := func(args ...string) string {
			t.Helper()
			args = append([]string{"--address", n.Socket, "--namespace", ns}, args...)
			out, err := exec.Command(ctr, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("ctr %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
			}
			return string(out)
		}
		run("images", "import", "--platform", platform, "--snapshotter", n.Snapshotter, archive)
		if out := run("images", "ls", "-q"); strings.TrimSpace(out) != ref {
			t.Errorf("%s: images after the import: %q, want %s", platform, out, ref)
		}
		// Under the node's directory, so that its teardown unmounts it if
		// the unmount below does not run.
		mnt := filepath.Join(n.Dir(), "rootfs-"+b.Arch)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		run("images", "mount", "--platform", platform, "--snapshotter", n.Snapshotter, ref, mnt)
		got, err := os.ReadFile(filepath.Join(mnt, "usr", "local", "bin", "correlator"))
		run("images", "unmount", "--rm", "--snapshotter", n.Snapshotter, mnt)
		if err != nil {
			t.Fatalf("%s: reading the mounted image: %v", platform, err)
		}
		want, err := os.ReadFile(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(got))
		if err != nil {
			t.Fatalf("%s: /usr/local/bin/correlator: %v", platform, err)
		}
		if f.Machine != machines[b.Arch] || !bytes.Equal(got, want) {
			t.Errorf("%s: /usr/local/bin/correlator is a %s ELF of %d bytes, want %s's %d bytes (%s)",
				platform, f.Machine, len(got), b.Path, len(want), machines[b.Arch])
		}
	}
}
