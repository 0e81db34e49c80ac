package testutil

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// baseApplets are linked into every rootfs even if `busybox --list` is
// unavailable; the rest of the list is added when it is.
func baseApplets() []string {
	return []string{
		"sh", "ls", "env", "sleep", "cat", "echo", "true", "false", "id", "ps",
		"wc", "head", "tail", "grep", "sed", "tr", "readlink", "kill", "mkdir",
	}
}

// defaultCaps is the capability set of `runc spec`, so exec'd processes look
// like a normal container root rather than a fully privileged one.
func defaultCaps() []string {
	return []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
}

// ociProcess is the subset of the OCI runtime-spec process object the
// harness writes, both in config.json and in `runc exec --process` files.
type ociProcess struct {
	Terminal        bool            `json:"terminal"`
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    ociCapabilities `json:"capabilities"`
	Rlimits         []ociRlimit     `json:"rlimits,omitempty"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociCapabilities struct {
	Bounding  []string `json:"bounding"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
	Ambient   []string `json:"ambient,omitempty"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociDeviceRule struct {
	Allow  bool   `json:"allow"`
	Access string `json:"access"`
}

type ociLinux struct {
	CgroupsPath string         `json:"cgroupsPath"`
	Namespaces  []ociNamespace `json:"namespaces"`
	Resources   struct {
		Devices []ociDeviceRule `json:"devices"`
	} `json:"resources"`
	MaskedPaths   []string `json:"maskedPaths"`
	ReadonlyPaths []string `json:"readonlyPaths"`
}

type ociSpec struct {
	OCIVersion string     `json:"ociVersion"`
	Process    ociProcess `json:"process"`
	Root       struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	} `json:"root"`
	Hostname string     `json:"hostname"`
	Mounts   []ociMount `json:"mounts"`
	Linux    ociLinux   `json:"linux"`
}

func newProcess(args, env []string) ociProcess {
	return ociProcess{
		User: ociUser{UID: 0, GID: 0},
		Args: args,
		Env:  env,
		Cwd:  "/",
		Capabilities: ociCapabilities{
			Bounding: defaultCaps(), Effective: defaultCaps(), Permitted: defaultCaps(),
		},
		Rlimits:         []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		NoNewPrivileges: true,
	}
}

// newSpec builds the config.json for a container: pid, mount, ipc and uts
// namespaces (the host network is shared: nothing here needs a network),
// and a Kubernetes-shaped cgroupsPath for runc's cgroupfs driver.
func newSpec(args, env []string, hostname, cgroupsPath string) ociSpec {
	s := ociSpec{OCIVersion: "1.0.2", Process: newProcess(args, env), Hostname: hostname}
	s.Root.Path = "rootfs"
	s.Mounts = []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=1777", "size=16384k"}},
	}
	s.Linux.CgroupsPath = cgroupsPath
	for _, ns := range []string{"pid", "mount", "ipc", "uts"} {
		s.Linux.Namespaces = append(s.Linux.Namespaces, ociNamespace{Type: ns})
	}
	s.Linux.Resources.Devices = []ociDeviceRule{{Allow: false, Access: "rwm"}}
	s.Linux.MaskedPaths = []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"}
	s.Linux.ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	return s
}

// writeBundle creates bundle/rootfs with a static busybox and its applet
// links, /etc files for `id` and `hostname`, the extra files (rootfs path to
// host path, see ContainerConfig.Files), and bundle/config.json.
func writeBundle(bundle, busybox string, files map[string]string, spec ociSpec) error {
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "tmp", "etc", "root", "sys"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return fmt.Errorf("creating rootfs dir %s: %w", d, err)
		}
	}
	if err := copyFile(busybox, filepath.Join(rootfs, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	for _, applet := range applets(busybox) {
		link := filepath.Join(rootfs, "bin", applet)
		if err := os.Symlink("busybox", link); err != nil && !os.IsExist(err) {
			return fmt.Errorf("linking busybox applet %s: %w", applet, err)
		}
	}
	etc := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":    "root:x:0:\nnogroup:x:65534:\n",
		"etc/hostname": spec.Hostname + "\n",
	}
	for name, content := range etc {
		if err := os.WriteFile(filepath.Join(rootfs, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("writing rootfs file %s: %w", name, err)
		}
	}
	for dst, src := range files {
		if err := copyIntoRootfs(rootfs, dst, src); err != nil {
			return err
		}
	}
	return writeJSON(filepath.Join(bundle, "config.json"), spec)
}

// copyIntoRootfs copies the host file src to the absolute rootfs path dst,
// mode 0755, creating parent directories. An existing file or applet link
// at dst is replaced, not written through.
func copyIntoRootfs(rootfs, dst, src string) error {
	if !filepath.IsAbs(dst) || filepath.Clean(dst) == "/" {
		return fmt.Errorf("copying %s into rootfs: destination %q is not an absolute file path", src, dst)
	}
	target := filepath.Join(rootfs, filepath.Clean(dst))
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("creating rootfs dir for %s: %w", dst, err)
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("replacing rootfs file %s: %w", dst, err)
	}
	return copyFile(src, target, 0o755)
}

// applets returns the fixed applet list plus whatever `busybox --list` adds.
func applets(busybox string) []string {
	seen := make(map[string]bool)
	var out []string
	add := func(a string) {
		if a != "" && a != "busybox" && !strings.Contains(a, "/") && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range baseApplets() {
		add(a)
	}
	if list, err := exec.Command(busybox, "--list").Output(); err == nil {
		for _, a := range strings.Fields(string(list)) {
			add(a)
		}
	}
	return out
}

// checkStatic fails when the binary at path is dynamically linked: the
// rootfs has no libc, so only static binaries run there. fix says how to get
// a static one.
func checkStatic(path, fix string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("reading binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("checking binary %s: dynamically linked; %s", path, fix)
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", dst, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
