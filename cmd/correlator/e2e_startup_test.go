package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
)

// A start-up failure of `correlator run`, as an operator meets it (a
// DaemonSet with a wrong volume, a taken port, a bad secret): the agent
// exits non-zero with one line naming what failed and where, no panic and
// no goroutine dump, and leaves no pins in the kernel.

// startupEnv is one start's files: a directory nobody may use too, the
// agent's flags, and the bpffs it pins in (private to the subtest).
type startupEnv struct {
	t     *testing.T
	dir   string
	flags map[string]string // flag → value; "" for a boolean flag
	cred  *syscall.Credential
}

// startupCase is one failure: what it changes, and what the error line
// must name.
type startupCase struct {
	name  string
	setup func(e *startupEnv) (want []string)
}

// newStartupEnv lays out a start with good settings: capture on, pinned in
// the subtest's private bpffs, the API on a free loopback port.
func newStartupEnv(t *testing.T) *startupEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "correlator-startup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Nobody can reach it (t.TempDir's parents are root's alone).
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &startupEnv{t: t, dir: dir, flags: map[string]string{
		"--listen": freePort(t), "--insecure-no-auth": "", "--log-level": "info",
		"--store":    "sqlite:" + filepath.Join(dir, "c.db"),
		"--pin-path": filepath.Join(testutil.BPFFSPath, "correlator"),
	}}
}

func (e *startupEnv) args() []string {
	args := []string{"run"}
	for _, f := range slices.Sorted(maps.Keys(e.flags)) {
		if args = append(args, f); e.flags[f] != "" {
			args = append(args, e.flags[f])
		}
	}
	return args
}

// file writes a file in the start's directory and returns its path.
func (e *startupEnv) file(name, content string, mode os.FileMode) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		e.t.Fatal(err)
	}
	return p
}

// mountTmpfs mounts a tmpfs at a new directory in the start's directory,
// in the subtest's private mount namespace, unmounted before the directory
// is removed.
func (e *startupEnv) mountTmpfs(name, opts string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", p, "tmpfs", 0, opts); err != nil {
		e.t.Fatalf("mounting a tmpfs (%s) at %s: %v", opts, p, err)
	}
	e.t.Cleanup(func() { unix.Unmount(p, unix.MNT_DETACH) })
	return p
}

// holdPort binds a loopback port for the rest of the test: taken.
func holdPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// startupRun is a started agent.
type startupRun struct {
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	exited chan struct{}
	err    error
}

// start runs the agent from this goroutine's thread, so it sees the
// subtest's mounts and private bpffs.
func (e *startupEnv) start(bin string) *startupRun {
	e.t.Helper()
	r := &startupRun{cmd: exec.Command(bin, e.args()...), stderr: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = io.Discard, r.stderr
	if e.cred != nil {
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
	}
	if err := r.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.exited) }()
	e.t.Cleanup(func() { r.cmd.Process.Kill(); <-r.exited })
	return r
}

// wait waits for the agent to exit by itself.
func (r *startupRun) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(testutil.EventuallyBound):
		t.Fatalf("%v still running after %s:\n%s", r.cmd.Args[1:], testutil.EventuallyBound, r.stderr)
	}
}

// checkFailed checks how a failed start ended: non-zero, by itself, with
// JSON log lines and then one error line that names each of want.
func checkFailed(t *testing.T, r *startupRun, want []string) {
	t.Helper()
	out := r.stderr.String()
	var exit *exec.ExitError
	if !errors.As(r.err, &exit) || exit.ExitCode() <= 0 {
		t.Fatalf("exit: %v, want a non-zero exit code of its own\n%s", r.err, out)
	}
	if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
		t.Fatalf("a panic or goroutine dump:\n%s", out)
	}
	var lines []string
	for l := range strings.SplitSeq(out, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		t.Fatal("nothing on stderr")
	}
	last := lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "{") {
			t.Errorf("a line neither a JSON log nor the last: %q\n%s", l, out)
		}
	}
	if !strings.HasPrefix(last, "correlator: ") {
		t.Errorf("last line %q, want the error, prefixed correlator:", last)
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Errorf("last line %q does not name %q", last, w)
		}
	}
}

// TestStartupFailures: each start-up failure an operator meets ends the
// agent as a DaemonSet's log should show it (checkFailed), and with
// nothing pinned: the private bpffs it pinned in is empty afterwards. The
// positive control starts the same harness with good settings: ready,
// pinned while it runs, and SIGTERM ends it with 0.
func TestStartupFailures(t *testing.T) {
	testutil.RequireRoot(t)
	bin := publicBinary(t)
	cases := []startupCase{
		{"store directory missing", func(e *startupEnv) []string {
			p := filepath.Join(e.dir, "missing", "dir", "db.sqlite")
			e.flags["--store"] = "sqlite:" + p
			return []string{"opening the store sqlite:" + p, "no such file or directory"}
		}},
		{"store on a read-only filesystem", func(e *startupEnv) []string {
			p := filepath.Join(e.mountTmpfs("ro", "ro,size=64k"), "c.db")
			e.flags["--store"] = "sqlite:" + p
			return []string{"opening the store sqlite:" + p, "read-only file system"}
		}},
		{"store disk full", func(e *startupEnv) []string {
			d := e.mountTmpfs("full", "size=64k")
			fill(e.t, filepath.Join(d, "fill"))
			p := filepath.Join(d, "c.db")
			e.flags["--store"] = "sqlite:" + p
			return []string{"opening the store sqlite:" + p, "disk is full"}
		}},
		{"API port taken", func(e *startupEnv) []string {
			e.flags["--listen"] = holdPort(e.t)
			return []string{"--listen", e.flags["--listen"], "address already in use"}
		}},
		{"pprof port taken", func(e *startupEnv) []string {
			e.flags["--pprof-listen"] = holdPort(e.t)
			return []string{"--pprof-listen " + e.flags["--pprof-listen"], "address already in use"}
		}},
		{"audit webhook port taken", func(e *startupEnv) []string {
			e.flags["--audit-webhook-listen"] = holdPort(e.t)
			return []string{"--audit-webhook-listen", e.flags["--audit-webhook-listen"], "address already in use"}
		}},
		{"TLS certificate missing", func(e *startupEnv) []string {
			cert := filepath.Join(e.dir, "missing.crt")
			e.flags["--tls-cert"], e.flags["--tls-key"] = cert, e.file("tls.key", "not a key\n", 0o600)
			return []string{"--tls-cert " + cert, "no such file or directory"}
		}},
		{"TLS certificate bad", func(e *startupEnv) []string {
			cert := e.file("tls.crt", "not a certificate\n", 0o600)
			e.flags["--tls-cert"], e.flags["--tls-key"] = cert, e.file("tls.key", "not a key\n", 0o600)
			return []string{"--tls-cert " + cert, "PEM"}
		}},
		{"token file missing", func(e *startupEnv) []string {
			p := filepath.Join(e.dir, "missing-tokens")
			delete(e.flags, "--insecure-no-auth")
			e.flags["--token-file"] = p
			return []string{"--token-file", p, "no such file or directory"}
		}},
		{"token file bad", func(e *startupEnv) []string {
			delete(e.flags, "--insecure-no-auth")
			e.flags["--token-file"] = e.file("tokens", "short\n", 0o600)
			return []string{"--token-file", e.flags["--token-file"], "too short"}
		}},
		{"token file writable by others", func(e *startupEnv) []string {
			delete(e.flags, "--insecure-no-auth")
			e.flags["--token-file"] = e.file("tokens", "0123456789abcdef0123456789abcdef\n", 0o666)
			return []string{"--token-file", e.flags["--token-file"], "writable by group or others"}
		}},
		{"pin path not on bpffs", func(e *startupEnv) []string {
			e.flags["--pin-path"] = filepath.Join(e.dir, "pins")
			return []string{"pin path " + e.flags["--pin-path"], "not on a bpf filesystem"}
		}},
		{"no privilege", func(e *startupEnv) []string {
			st := filepath.Join(e.dir, "nobody")
			if err := os.Mkdir(st, 0o700); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Chown(st, 65534, 65534); err != nil {
				e.t.Fatal(err)
			}
			e.flags["--store"] = "sqlite:" + filepath.Join(st, "c.db")
			e.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
			return []string{"loading the probes", "needs root"}
		}},
		{"Elasticsearch unreachable", func(e *startupEnv) []string {
			url := "http://" + freePort(e.t) // closed: nothing listens there
			e.flags["--store"] = "elasticsearch"
			e.flags["--es-url"] = url
			return []string{"opening the store elasticsearch (" + url + ")", "connection refused"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testutil.PrivateBPFFS(t)
			e := newStartupEnv(t)
			want := tc.setup(e)
			r := e.start(bin)
			r.wait(t)
			checkFailed(t, r, want)
			if got := bpffsEntries(t); len(got) != 0 {
				t.Errorf("left pinned after the failed start: %v", got)
			}
			if p := e.flags["--pin-path"]; !strings.HasPrefix(p, testutil.BPFFSPath) {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the failed start left %s: %v", p, err)
				}
			}
		})
	}

	t.Run("control: good settings start", func(t *testing.T) {
		testutil.PrivateBPFFS(t)
		e := newStartupEnv(t)
		r := e.start(bin)
		testutil.EventuallyNil(t, func() error {
			select {
			case <-r.exited:
				t.Fatalf("exited (%v) before ready:\n%s", r.err, r.stderr)
			default:
			}
			resp, err := http.Get("http://" + e.flags["--listen"] + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/readyz: %s", resp.Status)
			}
			return nil
		})
		if got := bpffsEntries(t); len(got) == 0 {
			t.Errorf("nothing pinned while it runs: the pin check could not see pins")
		}
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r.wait(t)
		if r.err != nil {
			t.Errorf("after SIGTERM: %v, want exit 0\n%s", r.err, r.stderr)
		}
		if out := r.stderr.String(); strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
			t.Errorf("a panic or goroutine dump:\n%s", out)
		}
	})
}

// fill writes p until its filesystem is full.
func fill(t *testing.T, p string) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", p, err)
			}
			return
		}
	}
}

// publicBinary is buildBinary's binary copied where nobody may run it.
func publicBinary(t *testing.T) string {
	t.Helper()
	src := buildBinary(t)
	dir, err := os.MkdirTemp("", "correlator-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "correlator")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
