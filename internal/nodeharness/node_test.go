package nodeharness

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/meta"
)

const auditKey = "KUBERNETES_EXEC_AUDIT_ID"

// podSpec is one pod of the test: a busybox container that sleeps, with a
// baseline environment holding a key the exec will override.
type podSpec struct {
	namespace, name, uid string
	labels               map[string]string
}

// TestNode runs a real containerd node: two pods in two namespaces, execs
// through the task API with an environment merged the KEP-6035 way, an
// exec through the CRI's ExecSync with none, and the agent's metadata
// resolver against the node's CRI socket.
func TestNode(t *testing.T) {
	testutil.RequireRoot(t)
	began := time.Now()
	n := Start(t, Options{})
	t.Logf("node up in %v (install %v, images %v, containerd to CRI ready %v, import %v), snapshotter %s",
		time.Since(began).Round(time.Millisecond), n.Timings.Install.Round(time.Millisecond),
		n.Timings.Images.Round(time.Millisecond), n.Timings.Containerd.Round(time.Millisecond),
		n.Timings.Import.Round(time.Millisecond), n.Snapshotter)

	pods := []podSpec{
		{"team-a", "web", testutil.RandomUUID(), map[string]string{"app": "web"}},
		{"team-b", "db", testutil.RandomUUID(), map[string]string{"app": "db", "tier": "data"}},
	}
	ids := make([]string, len(pods))
	for i, p := range pods {
		began := time.Now()
		podID, err := n.RunPod(p.namespace, p.name, p.uid, p.labels)
		if err != nil {
			t.Fatal(err)
		}
		sandboxed := time.Since(began)
		ids[i], err = n.StartContainer(podID, "app", ociimage.BusyboxRef,
			[]string{"/bin/sleep", "100000"}, "DUP=baseline", "KEEP=1")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pod %s/%s: sandbox %v, container started %v after it",
			p.namespace, p.name, sandboxed.Round(time.Millisecond), (time.Since(began) - sandboxed).Round(time.Millisecond))
	}

	t.Run("cgroup", func(t *testing.T) {
		for i, p := range pods {
			pid, err := n.ContainerPID(ids[i])
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			if err != nil {
				t.Fatal(err)
			}
			want := CgroupParent(p.uid) + "/" + ids[i]
			if !strings.Contains(string(b), ":"+want+"\n") {
				t.Errorf("container %s/%s init in cgroups\n%s\nwant %s", p.namespace, p.name, b, want)
			}
		}
	})

	t.Run("echo", func(t *testing.T) {
		out, err := n.ExecWithEnv(ids[0], []string{"/bin/echo", "hi"}, auditKey+"="+testutil.RandomUUID())
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if out != "hi\n" {
			t.Errorf("echo printed %q, want %q", out, "hi\n")
		}
	})

	t.Run("merged environment", func(t *testing.T) {
		for i, p := range pods {
			checkExecEnviron(t, n, ids[i], p)
		}
	})

	// Positive control for the environ reads above: a spec that repeats a
	// key reaches the process with the key once, at its first position,
	// with the last value (runc's os.Setenv), and the KEP-6035 order, ID
	// first, survives as given.
	t.Run("runc folds duplicate keys", func(t *testing.T) {
		id := auditKey + "=" + testutil.RandomUUID()
		e, err := n.StartExecExactEnv(ids[0], []string{"/bin/sleep", "30"},
			[]string{id, "PATH=/bin", "K=first", "X=1", "K=second", "HOME=/home"})
		if err != nil {
			t.Fatal(err)
		}
		got := environ(t, e.Pid, "/bin/sleep", "30")
		stopExec(t, e)
		want := []string{id, "PATH=/bin", "K=second", "X=1", "HOME=/home"}
		if !slices.Equal(got, want) {
			t.Errorf("exec environment\n%q\nwant\n%q", got, want)
		}
	})

	t.Run("CRI ExecSync has no ID", func(t *testing.T) {
		stdout, stderr, code, err := n.CRIExec(ids[1], []string{"/bin/env"})
		if err != nil || code != 0 {
			t.Fatalf("env: %v, exit %d, stderr %q", err, code, stderr)
		}
		if strings.Contains(stdout, auditKey) || !strings.Contains(stdout, "DUP=baseline\n") {
			t.Errorf("env through ExecSync printed\n%s\nwant the baseline and no %s", stdout, auditKey)
		}
	})

	t.Run("CRI streaming exec has no ID", func(t *testing.T) {
		stdout, stderr, err := n.CRIStreamExec(ids[0], []string{"/bin/env"})
		if err != nil {
			t.Fatalf("%v; stderr %q", err, stderr)
		}
		if strings.Contains(stdout, auditKey) || !strings.Contains(stdout, "DUP=baseline\n") {
			t.Errorf("env through the streaming exec printed\n%s\nwant the baseline and no %s", stdout, auditKey)
		}
		// A failing command reports its exit through the status channel.
		if _, _, err := n.CRIStreamExec(ids[0], []string{"/bin/false"}); err == nil {
			t.Error("streaming exec of /bin/false succeeded")
		}
	})

	t.Run("metadata from the CRI", func(t *testing.T) {
		cfg := meta.Default()
		cfg.CRISocket = n.Socket
		svc, err := meta.New(cfg, zerolog.Nop(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		for i, p := range pods {
			info, ok, err := svc.Resolve(context.Background(), ids[i], "")
			if err != nil || !ok {
				t.Fatalf("resolving %s: ok %v, %v", ids[i], ok, err)
			}
			want := meta.Info{ContainerID: ids[i], PodUID: p.uid, Namespace: p.namespace, Pod: p.name, Container: "app", Labels: p.labels}
			if !reflect.DeepEqual(info, want) {
				t.Errorf("resolved %+v, want %+v", info, want)
			}
		}
	})
}

// checkExecEnviron starts a long exec carrying a new audit ID and an
// override of the baseline's DUP, and checks both what its process spec
// asked for and what the process got (read from the host): the container's
// baseline with DUP replaced in place and the ID appended, exactly, in
// order, each key once. runc adds HOME after everything when the spec has
// none, in execs and init alike; runc would also fold a duplicate key into
// its first position, so only the spec shows how the merge treated it.
func checkExecEnviron(t *testing.T, n *Node, containerID string, p podSpec) {
	t.Helper()
	initPID, err := n.ContainerPID(containerID)
	if err != nil {
		t.Fatal(err)
	}
	baseline := environ(t, initPID, "/bin/sleep", "100000")
	dup := slices.Index(baseline, "DUP=baseline")
	if dup < 0 {
		t.Fatalf("pod %s/%s: baseline %q has no DUP=baseline", p.namespace, p.name, baseline)
	}
	id := auditKey + "=" + testutil.RandomUUID()
	e, err := n.StartExec(containerID, []string{"/bin/sleep", "30"}, "DUP=exec", id)
	if err != nil {
		t.Fatal(err)
	}
	got := environ(t, e.Pid, "/bin/sleep", "30")
	stopExec(t, e)

	// The spec's baseline is init's environment less what runc appended.
	want := slices.Clone(baseline)
	home := ""
	if last := want[len(want)-1]; strings.HasPrefix(last, "HOME=") {
		home, want = last, want[:len(want)-1]
	}
	want[dup] = "DUP=exec"
	want = append(want, id)
	if !slices.Equal(e.Env, want) {
		t.Errorf("pod %s/%s: exec process spec env\n%q\nwant\n%q", p.namespace, p.name, e.Env, want)
	}
	if home != "" {
		want = append(want, home)
	}
	if !slices.Equal(got, want) {
		t.Errorf("pod %s/%s: exec environment\n%q\nwant\n%q", p.namespace, p.name, got, want)
	}
	if c := count(got, "DUP="); c != 1 || slices.Index(got, "DUP=exec") != dup {
		t.Errorf("pod %s/%s: DUP %d times, at %d; want once, in place at %d", p.namespace, p.name, c, slices.Index(got, "DUP=exec"), dup)
	}
	if c := count(got, auditKey+"="); c != 1 {
		t.Errorf("pod %s/%s: %s %d times, want once", p.namespace, p.name, auditKey, c)
	}
	t.Logf("pod %s/%s: exec environment %q", p.namespace, p.name, got)
}

// stopExec kills a running exec and reaps it.
func stopExec(t *testing.T, e *Exec) {
	t.Helper()
	if err := e.Kill(syscall.SIGKILL); err != nil {
		t.Error(err)
	}
	if code, out, err := e.Wait(); err != nil || code != 128+uint32(syscall.SIGKILL) {
		t.Errorf("exec after SIGKILL: exit %d, %v, output %q", code, err, out)
	}
}

// environ reads pid's environment once it runs argv: runc's exec returns
// with the PID of its init, which execs the command a moment later.
func environ(t *testing.T, pid int, argv ...string) []string {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	testutil.EventuallyNil(t, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return err
		}
		if string(b) != want {
			return fmt.Errorf("waiting for PID %d to run %q: it runs %q", pid, argv, b)
		}
		return nil
	})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

func count(env []string, prefix string) int {
	n := 0
	for _, e := range env {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}
