package ociimage

import (
	"debug/elf"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// The references the three images are imported under.
const (
	PauseRef      = "registry.k8s.io/pause:e2e"
	BusyboxRef    = "docker.io/library/busybox:e2e"
	CorrelatorRef = "ghcr.io/execid/correlator:e2e"
)

// DefaultPath is the PATH of the busybox image, as the Docker Hub busybox
// and distroless images set it.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

//go:embed pause/main.go
var pauseSource []byte

// Pause writes the pause image to path: /pause, a static Go program built
// here from pause/main.go with CGO_ENABLED=0, run as 65535:65535 like
// registry.k8s.io/pause. Building it needs the go command (on PATH or in
// /usr/local/go/bin).
func Pause(path string) error {
	dir, err := os.MkdirTemp("", "ociimage-pause-*")
	if err != nil {
		return fmt.Errorf("creating pause build directory: %w", err)
	}
	defer os.RemoveAll(dir)
	bin, err := buildPause(dir, runtime.GOARCH)
	if err != nil {
		return err
	}
	return Write(path, Spec{
		Ref:        PauseRef,
		Files:      []File{{Path: "/pause", Source: bin, Mode: 0o755}},
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
		CreatedBy:  "ociimage.Pause: /pause from internal/ociimage/pause",
	})
}

// buildPause builds the embedded pause source for linux/goarch in its own
// module under dir, so the build does not depend on the working directory
// or this module's go.mod, and returns the binary's path, dir/pause-goarch.
func buildPause(dir, goarch string) (string, error) {
	goBin, err := goCommand()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module pause\n\ngo 1.22\n"), 0o644); err != nil {
		return "", fmt.Errorf("writing pause go.mod: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), pauseSource, 0o644); err != nil {
		return "", fmt.Errorf("writing pause source: %w", err)
	}
	bin := filepath.Join(dir, "pause-"+goarch)
	cmd := exec.Command(goBin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building pause for %s: %w: %s", goarch, err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	const fallback = "/usr/local/go/bin/go"
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", errors.New("finding the go command: not on PATH nor at " + fallback)
}

// Busybox writes the busybox image to path: the host's static busybox (from
// Debian's busybox-static) at /bin/busybox, and /bin/<applet> for each
// applet it lists, a symlink to the absolute /bin/busybox, /bin/sh among
// them; /etc/passwd, /etc/group, /root and /tmp. Debian's busybox runs
// applets in-process (a shell's `echo` or a lone `sh -c cmd` need no
// execve), so a test that needs a real exec must say /bin/<applet>.
func Busybox(path string) error {
	bin, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("finding busybox: %w (install Debian's busybox-static)", err)
	}
	if bin, err = filepath.EvalSymlinks(bin); err != nil {
		return fmt.Errorf("resolving busybox: %w", err)
	}
	if err := requireStatic(bin); err != nil {
		return fmt.Errorf("%w (install Debian's busybox-static)", err)
	}
	applets, err := busyboxApplets(bin)
	if err != nil {
		return err
	}
	files := []File{
		{Path: "/bin/busybox", Source: bin, Mode: 0o755},
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Path: "/etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky},
	}
	for _, a := range applets {
		files = append(files, File{Path: "/bin/" + a, Link: "/bin/busybox"})
	}
	return Write(path, Spec{
		Ref:       BusyboxRef,
		Files:     files,
		Cmd:       []string{"sh"},
		Env:       []string{DefaultPath},
		CreatedBy: "ociimage.Busybox: " + bin + " and its applet links",
	})
}

// busyboxApplets lists the applets of bin (`busybox --list`), sh always
// among them, sorted, without busybox itself.
func busyboxApplets(bin string) ([]string, error) {
	out, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("listing busybox applets: %w", err)
	}
	seen := map[string]bool{"sh": true}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			seen[a] = true
		}
	}
	applets := make([]string, 0, len(seen))
	for a := range seen {
		applets = append(applets, a)
	}
	sort.Strings(applets)
	return applets, nil
}

// CorrelatorSpec is the image of correlator's static binary, as the
// Dockerfile builds it on distroless: /usr/local/bin/correlator as the
// entrypoint, --help as the default arguments (the Helm chart passes its
// own), uid 65532 (distroless's nonroot; the chart's DaemonSet runs the
// agent as uid 0), /etc/passwd and /etc/group naming both, and /tmp.
func CorrelatorSpec(ref, binary string) Spec {
	return Spec{
		Ref: ref,
		Files: []File{
			{Path: "/usr/local/bin/correlator", Source: binary, Mode: 0o755},
			{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
			{Path: "/etc/group", Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
			{Path: "/home/nonroot", Dir: true, Mode: 0o700},
			{Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky},
		},
		Entrypoint: []string{"/usr/local/bin/correlator"},
		Cmd:        []string{"--help"},
		Env:        []string{DefaultPath},
		User:       "65532:65532",
		CreatedBy:  "ociimage.Correlator: /usr/local/bin/correlator",
	}
}

// Correlator writes correlator's image (CorrelatorSpec) to path under
// CorrelatorRef. binary must be statically linked (CGO_ENABLED=0): the
// image has no libc.
func Correlator(path, binary string) error {
	return WriteCorrelator(path, CorrelatorRef, binary)
}

// WriteCorrelator is Correlator with another reference. The image is for
// the build machine's architecture (runtime.GOARCH), and binary must be too.
func WriteCorrelator(path, ref, binary string) error {
	if err := requireCorrelator(binary, runtime.GOARCH); err != nil {
		return err
	}
	return Write(path, CorrelatorSpec(ref, binary))
}

// Binary is correlator's static binary for one architecture.
type Binary struct {
	// Arch is the GOARCH it was built for: amd64, arm64.
	Arch string
	Path string
}

// WriteCorrelatorIndex writes correlator's image for each of binaries to
// path as one image index under ref (WriteIndex), for `make image`: one
// reference that a node of any of those architectures pulls its own
// binary from. Each binary must be static and an ELF of its Arch.
func WriteCorrelatorIndex(path, ref string, binaries []Binary) error {
	specs := make([]Spec, 0, len(binaries))
	for _, b := range binaries {
		if err := requireCorrelator(b.Path, b.Arch); err != nil {
			return err
		}
		spec := CorrelatorSpec(ref, b.Path)
		spec.Platform = LinuxPlatform(b.Arch)
		specs = append(specs, spec)
	}
	return WriteIndex(path, ref, specs)
}

// requireCorrelator fails unless binary is static and built for goarch.
func requireCorrelator(binary, goarch string) error {
	if err := requireStatic(binary); err != nil {
		return fmt.Errorf("%w (build it with CGO_ENABLED=0)", err)
	}
	if err := requireMachine(binary, goarch); err != nil {
		return fmt.Errorf("%w (build it with GOOS=linux GOARCH=%s)", err, goarch)
	}
	return nil
}

// requireStatic fails unless path is an ELF executable with no program
// interpreter and no needed shared libraries.
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("reading ELF %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("checking %s: dynamically linked (has a program interpreter)", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("reading ELF %s: %w", path, err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("checking %s: needs shared libraries %v", path, libs)
	}
	return nil
}
