package testutil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const auditKey = "KUBERNETES_EXEC_AUDIT_ID"

func TestIDs(t *testing.T) {
	seen := make(map[string]bool)
	for range 100 {
		u, id := RandomUUID(), RandomContainerID()
		if !IsUUID(u) || u[14] != '4' || !strings.ContainsRune("89ab", rune(u[19])) {
			t.Fatalf("RandomUUID() = %q: not a v4 UUID", u)
		}
		if !IsContainerID(id) {
			t.Fatalf("RandomContainerID() = %q: not 64 lowercase hex", id)
		}
		if seen[u] || seen[id] {
			t.Fatalf("duplicate random value %q / %q", u, id)
		}
		seen[u], seen[id] = true, true
	}
	for _, bad := range []string{"", "unknown", strings.Repeat("A", 64), strings.Repeat("0", 63)} {
		if IsContainerID(bad) {
			t.Errorf("IsContainerID(%q) = true", bad)
		}
		if IsUUID(bad) {
			t.Errorf("IsUUID(%q) = true", bad)
		}
	}
}

func TestMounts(t *testing.T) {
	EnsureBPFFS(t)
	EnsureTracefs(t)
	if _, err := os.Stat(filepath.Join(TracefsPath, "events", "sched", "sched_process_exec")); err != nil {
		t.Fatalf("tracefs mounted but sched_process_exec missing: %v", err)
	}
}

// execCtx bounds one exec, which should simply complete: the bound only
// stops a hang, so a busy machine makes the exec slower, never red.
func execCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), EventuallyBound)
	t.Cleanup(cancel)
	return ctx
}

func envLines(out []byte) []string {
	var env []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(l, "=") {
			env = append(env, l)
		}
	}
	return env
}

func TestContainerExec(t *testing.T) {
	t.Parallel()
	c := NewContainer(t, ContainerConfig{})

	auditID := RandomUUID()
	// The shell re-exports its variables in hash order, so the env order that
	// runc passed to execve (what the probe reads from mm->env_start) is
	// read from /proc/$$/environ rather than from `env`. It is read through a
	// pipe: a redirect on the last command would be opened by the shell and
	// then read by tr after sh exec'd into it, when the old mm is gone.
	script := "echo $" + auditKey + `; cat /proc/$$/environ | tr '\0' '\n'`
	out, err := c.Exec(execCtx(t), []string{"sh", "-c", script}, auditKey+"="+auditID)
	if err != nil {
		t.Fatalf("Exec: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if lines[0] != auditID {
		t.Fatalf("echoed %q, want %q; output:\n%s", lines[0], auditID, out)
	}
	env := envLines([]byte(strings.Join(lines[1:], "\n")))
	wantEnv := append(append([]string(nil), c.Env...), auditKey+"="+auditID)
	if strings.Join(env, ",") != strings.Join(wantEnv, ",") {
		t.Fatalf("runc exec --env: want env %q (key last), got %q; output:\n%s", wantEnv, env, out)
	}

	// KEP order: the key first, then the baseline.
	first := append([]string{auditKey + "=" + auditID}, c.Env...)
	out, err = c.ExecProcess(execCtx(t), first, []string{"/bin/env"})
	if err != nil {
		t.Fatalf("ExecProcess: %v: %s", err, out)
	}
	if env := envLines(out); strings.Join(env, ",") != strings.Join(first, ",") {
		t.Fatalf("ExecProcess: want env %q, got %q", first, env)
	}

	// The key in the middle.
	middle := []string{"PATH=/bin", auditKey + "=" + auditID, "HOSTNAME=x", "HOME=/"}
	out, err = c.ExecProcess(execCtx(t), middle, []string{"/bin/env"})
	if err != nil {
		t.Fatalf("ExecProcess: %v: %s", err, out)
	}
	if got := strings.Join(envLines(out), ","); got != strings.Join(middle, ",") {
		t.Fatalf("ExecProcess: want env %q, got %q", middle, got)
	}

	// Without HOME, runc appends HOME=<passwd home> at the end of the env.
	out, err = c.ExecProcess(execCtx(t), []string{"PATH=/bin"}, []string{"/bin/env"})
	if got := strings.Join(envLines(out), ","); err != nil || got != "PATH=/bin,HOME=/root" {
		t.Fatalf("ExecProcess without HOME: err=%v env=%q", err, got)
	}

	// A failing command reports its exit status and still returns output.
	out, err = c.Exec(execCtx(t), []string{"sh", "-c", "echo oops >&2; exit 3"})
	if err == nil || !strings.Contains(string(out), "oops") {
		t.Fatalf("Exec of failing command: err=%v out=%q", err, out)
	}
}

func TestContainerCgroupPlacement(t *testing.T) {
	t.Parallel()
	c := NewContainer(t, ContainerConfig{})
	if !IsContainerID(c.ID) || !IsUUID(c.PodUID) {
		t.Fatalf("bad generated IDs: id=%q pod=%q", c.ID, c.PodUID)
	}
	want := fmt.Sprintf("/kubepods/burstable/pod%s/%s", c.PodUID, c.ID)
	if c.CgroupPath != want {
		t.Fatalf("CgroupPath = %q, want %q", c.CgroupPath, want)
	}
	check := func(pid int) {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("/proc/%d/cgroup:\n%s", pid, b)
		var unified bool
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) != 3 || parts[2] != want {
				t.Errorf("pid %d: cgroup line %q not in %s", pid, l, want)
			}
			unified = unified || strings.HasPrefix(l, "0::")
		}
		if !unified {
			t.Errorf("pid %d: no cgroup2 (0::) line", pid)
		}
	}
	check(c.InitPID())

	// An exec'd process lands in the same cgroups; the child is a sh that
	// reports its own host-visible cgroup file.
	out, err := c.Exec(execCtx(t), []string{"cat", "/proc/self/cgroup"})
	if err != nil {
		t.Fatalf("Exec: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "0::"+want) {
		t.Fatalf("exec'd process cgroup:\n%s\nwant 0::%s", out, want)
	}
}

func TestContainerCleanup(t *testing.T) {
	t.Parallel()
	RequireRoot(t)
	var cs [2]*Container
	t.Run("run", func(t *testing.T) {
		// Two concurrent containers; the subtest's cleanup destroys them.
		cs[0] = NewContainer(t, ContainerConfig{})
		cs[1] = NewContainer(t, ContainerConfig{})
		if cs[0].ID == cs[1].ID || cs[0].StateRoot == cs[1].StateRoot || cs[0].InitPID() == cs[1].InitPID() {
			t.Fatalf("containers share identity: %+v %+v", cs[0], cs[1])
		}
		for _, c := range cs {
			out, err := c.Exec(execCtx(t), []string{"hostname"})
			if err != nil {
				t.Fatalf("Exec: %v: %s", err, out)
			}
		}
	})
	mounts, err := CgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c == nil {
			t.Fatal("subtest did not start containers")
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", c.InitPID())); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.InitPID())); !strings.Contains(string(b), ") Z ") {
				t.Errorf("init pid %d still alive after cleanup", c.InitPID())
			}
		}
		if _, err := os.Stat(filepath.Join(c.StateRoot, c.ID)); !os.IsNotExist(err) {
			t.Errorf("runc state %s left behind (err=%v)", filepath.Join(c.StateRoot, c.ID), err)
		}
		for _, m := range mounts {
			for _, p := range []string{c.CgroupPath, filepath.Dir(c.CgroupPath)} {
				if _, err := os.Stat(filepath.Join(m, p)); !os.IsNotExist(err) {
					t.Errorf("cgroup %s left behind", filepath.Join(m, p))
				}
			}
		}
	}
}
