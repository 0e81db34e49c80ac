package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/execid/correlator/internal/testutil"
)

// entry is one file of an image's filesystem as read back from its layers.
type entry struct {
	typ  byte
	mode int64
	link string
	data []byte
}

// readArchive unpacks an OCI layout archive and reads its only image back
// with go-containerregistry: the index descriptor and the image.
func readArchive(t *testing.T, archive string) (v1.Descriptor, v1.Image) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(unpackArchive(t, archive))
	if err != nil {
		t.Fatalf("reading layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatalf("reading image: %v", err)
	}
	return desc, img
}

// unpackArchive unpacks an OCI layout archive into a temporary directory,
// checking that every entry has the fixed time and root ownership, and
// returns the directory.
func unpackArchive(t *testing.T, archive string) string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading archive: %v", err)
		}
		if !hdr.ModTime.Equal(epoch()) || hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" {
			t.Errorf("archive entry %s: mtime %v uid %d gid %d uname %q, want epoch and root", hdr.Name, hdr.ModTime, hdr.Uid, hdr.Gid, hdr.Uname)
		}
		p := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %s: type %c", hdr.Name, hdr.Typeflag)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		t.Fatalf("archive has no oci-layout: %v", err)
	}
	return dir
}

// files reads every file of img's layers.
func files(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reading layer: %v", err)
			}
			if !hdr.ModTime.Equal(epoch()) || hdr.Uid != 0 || hdr.Gid != 0 {
				t.Errorf("layer entry %s: mtime %v uid %d gid %d", hdr.Name, hdr.ModTime, hdr.Uid, hdr.Gid)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out["/"+strings.TrimSuffix(hdr.Name, "/")] = entry{typ: hdr.Typeflag, mode: hdr.Mode, link: hdr.Linkname, data: b}
		}
		rc.Close()
	}
	return out
}

func checkConfig(t *testing.T, desc v1.Descriptor, img v1.Image, ref string, entrypoint, cmd []string, user string) {
	t.Helper()
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if got := desc.Annotations[AnnotationImageName]; got != ref {
		t.Errorf("annotation %s = %q, want %q", AnnotationImageName, got, ref)
	}
	if got := desc.Annotations[AnnotationRefName]; got != tag {
		t.Errorf("annotation %s = %q, want %q", AnnotationRefName, got, tag)
	}
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("descriptor platform %+v, want linux/%s", desc.Platform, runtime.GOARCH)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("image media type %s", mt)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
	}
	if !cf.Created.Time.Equal(epoch()) {
		t.Errorf("config created %v, want %v", cf.Created.Time, epoch())
	}
	if !slices.Equal(cf.Config.Entrypoint, entrypoint) || !slices.Equal(cf.Config.Cmd, cmd) || cf.Config.User != user {
		t.Errorf("config entrypoint %q cmd %q user %q, want %q %q %q",
			cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, entrypoint, cmd, user)
	}
	if len(cf.RootFS.DiffIDs) != 1 || len(cf.History) != 1 {
		t.Errorf("config has %d diff IDs and %d history entries, want 1 and 1", len(cf.RootFS.DiffIDs), len(cf.History))
	}
}

func TestBusybox(t *testing.T) {
	host, err := exec.LookPath("busybox")
	if err != nil || requireStatic(host) != nil {
		if testutil.InCI() {
			t.Fatalf("no static busybox on PATH (busybox-static): %v", err)
		}
		t.Skip("no static busybox on PATH: apt-get install busybox-static")
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "busybox.tar")
	if err := Busybox(archive); err != nil {
		t.Fatal(err)
	}
	desc, img := readArchive(t, archive)
	checkConfig(t, desc, img, BusyboxRef, nil, []string{"sh"}, "")
	fs := files(t, img)
	want, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	if e := fs["/bin/busybox"]; e.typ != tar.TypeReg || e.mode != 0o755 || !bytes.Equal(e.data, want) {
		t.Errorf("/bin/busybox: type %c mode %o, %d bytes; want the host's %d bytes, 0755", e.typ, e.mode, len(e.data), len(want))
	}
	for _, a := range []string{"sh", "echo", "sleep", "cat", "env"} {
		if e := fs["/bin/"+a]; e.typ != tar.TypeSymlink || e.link != "/bin/busybox" {
			t.Errorf("/bin/%s: type %c link %q, want a symlink to /bin/busybox", a, e.typ, e.link)
		}
	}
	if e := fs["/tmp"]; e.typ != tar.TypeDir || e.mode != 0o1777 {
		t.Errorf("/tmp: type %c mode %o, want a 1777 directory", e.typ, e.mode)
	}
	if e := fs["/etc/passwd"]; !strings.HasPrefix(string(e.data), "root:x:0:0:") {
		t.Errorf("/etc/passwd = %q", e.data)
	}

	// Deterministic: a second build is the same archive, byte for byte.
	again := filepath.Join(dir, "again.tar")
	if err := Busybox(again); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(archive)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Errorf("two builds differ: %d and %d bytes", len(a), len(b))
	}
}

func TestPause(t *testing.T) {
	if _, err := goCommand(); err != nil {
		t.Skip(err)
	}
	archive := filepath.Join(t.TempDir(), "pause.tar")
	if err := Pause(archive); err != nil {
		t.Fatal(err)
	}
	desc, img := readArchive(t, archive)
	checkConfig(t, desc, img, PauseRef, []string{"/pause"}, nil, "65535:65535")
	e := files(t, img)["/pause"]
	if e.typ != tar.TypeReg || e.mode != 0o755 || !bytes.HasPrefix(e.data, []byte("\x7fELF")) {
		t.Fatalf("/pause: type %c mode %o, %d bytes; want a 0755 ELF file", e.typ, e.mode, len(e.data))
	}
}

// TestPauseProgram runs the pause program on the host: it must be static,
// keep running (asleep), and stop on SIGTERM. The Go runtime catches every
// signal from its first instruction, before main's signal.Notify, so a
// SIGTERM that lands before main ends the process by the signal instead of
// exit 0; both are a stop on SIGTERM, and nothing else is accepted.
func TestPauseProgram(t *testing.T) {
	if _, err := goCommand(); err != nil {
		t.Skip(err)
	}
	bin, err := buildPause(t.TempDir(), runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if err := requireStatic(bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "pause sleeps", func() bool { return sleeping(cmd.Process.Pid) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err != nil && !(ws.Signaled() && ws.Signal() == syscall.SIGTERM) {
		t.Fatalf("pause after SIGTERM: %v, want exit 0", err)
	}
}

// sleeping reports whether pid is in state S (interruptible sleep).
func sleeping(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "S")
}

func TestCorrelator(t *testing.T) {
	if _, err := goCommand(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	// Any static binary stands in for correlator's: the pause program.
	bin, err := buildPause(dir, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "correlator.tar")
	if err := Correlator(archive, bin); err != nil {
		t.Fatal(err)
	}
	desc, img := readArchive(t, archive)
	checkConfig(t, desc, img, CorrelatorRef, []string{"/usr/local/bin/correlator"}, []string{"--help"}, "65532:65532")
	fs := files(t, img)
	want, _ := os.ReadFile(bin)
	if e := fs["/usr/local/bin/correlator"]; e.typ != tar.TypeReg || e.mode != 0o755 || !bytes.Equal(e.data, want) {
		t.Errorf("/usr/local/bin/correlator: type %c mode %o, %d bytes; want the binary's %d bytes, 0755", e.typ, e.mode, len(e.data), len(want))
	}
	if e := fs["/etc/passwd"]; !strings.Contains(string(e.data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd = %q", e.data)
	}
}

func TestCorrelatorRejectsDynamicBinary(t *testing.T) {
	dynamic, err := os.Executable() // go test binaries on Linux may be static; find a dynamic one
	if err != nil || requireStatic(dynamic) == nil {
		for _, p := range []string{"/bin/ls", "/usr/bin/ls", "/bin/sh"} {
			if requireStatic(p) != nil {
				if _, err := os.Stat(p); err == nil {
					dynamic = p
					break
				}
			}
		}
	}
	if requireStatic(dynamic) == nil {
		t.Skip("no dynamically linked binary found")
	}
	err = Correlator(filepath.Join(t.TempDir(), "c.tar"), dynamic)
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("Correlator(%s) = %v, want an error naming CGO_ENABLED=0", dynamic, err)
	}
}

func TestLayerTar(t *testing.T) {
	b, err := LayerTar([]File{
		{Path: "/usr/local/bin/x", Data: []byte("x"), Mode: 0o755},
		{Path: "/bin/sh", Link: "/bin/busybox"},
		{Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, hdr.Name+" "+strconv.FormatInt(hdr.Mode, 8))
	}
	want := []string{"bin/ 755", "bin/sh 777", "tmp/ 1777", "usr/ 755", "usr/local/ 755", "usr/local/bin/ 755", "usr/local/bin/x 755"}
	if !slices.Equal(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}

	for name, bad := range map[string][]File{
		"relative":     {{Path: "bin/sh", Data: nil}},
		"unclean":      {{Path: "/bin/../sh"}},
		"twice":        {{Path: "/a"}, {Path: "/a"}},
		"file parent":  {{Path: "/a", Data: []byte("x")}, {Path: "/a/b"}},
		"missing file": {{Path: "/a", Source: "/nonexistent/file"}},
	} {
		if _, err := LayerTar(bad); err == nil {
			t.Errorf("%s: LayerTar succeeded, want an error", name)
		}
	}
}

func TestRefTag(t *testing.T) {
	for ref, want := range map[string]string{
		"docker.io/library/busybox:e2e":  "e2e",
		"localhost:5000/a/b:v1.2":        "v1.2",
		"registry.k8s.io/pause:3.9":      "3.9",
		"ghcr.io/execid/correlator:dev":  "dev",
		"busybox:e2e":                    "",
		"docker.io/library/busybox":      "",
		"localhost:5000/busybox":         "",
		"docker.io/library/busybox@sha2": "",
	} {
		got, err := refTag(ref)
		if want == "" {
			if err == nil {
				t.Errorf("refTag(%q) = %q, want an error", ref, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("refTag(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
}
