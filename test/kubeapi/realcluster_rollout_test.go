//go:build e2ecluster

package kubeapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/cluster"
)

// correlatorNextRef is the image the rollout moves the agent to: the same
// source linked as another version, so another image.
const correlatorNextRef = "ghcr.io/execid/correlator:e2e-next"

// rollout keeps one of alice's sessions open while the agent's DaemonSet
// moves to correlatorNextRef, as `kubectl set image` and the DaemonSet
// controller do with the chart's maxUnavailable 1 (no controller runs
// here: the test deletes the old pod and creates the new one from the
// updated template). One exec in the session runs while no agent runs,
// one after the new agent starts; both must be alice's, and the new agent
// must account for the window it did not read, with nothing dropped.
func (c *realCluster) rollout(t *testing.T, resp pluginAs, old *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	sess := c.kubectl(t, alice, "shop").start(t, "exec", "-i", "web-0", "--", "sh", "-c",
		"echo ready; read a; /bin/cat /proc/loadavg >/dev/null; echo one; read b; /bin/cat /proc/meminfo >/dev/null; echo two")
	sess.expect(t, "ready")
	var id string
	testutil.EventuallyNil(t, func() error {
		got := decode[cluster.Session](t, resp.quiet(t, "sessions", "--user", alice.name, "--pod", "web-0", "-o", "json"))
		for _, s := range got.Items {
			if s.ProcessCount > 0 && strings.Contains(strings.Join(s.Command, " "), "read a") {
				id = s.AuditID
				return nil
			}
		}
		return fmt.Errorf("the old agent does not hold alice's open session yet")
	})

	dsClient := c.api.client.AppsV1().DaemonSets(old.Namespace)
	ds, err := dsClient.Get(ctx, c.agent.ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the DaemonSet: %v", err)
	}
	for i := range ds.Spec.Template.Spec.Containers {
		if ds.Spec.Template.Spec.Containers[i].Image == ociimage.CorrelatorRef {
			ds.Spec.Template.Spec.Containers[i].Image = correlatorNextRef
		}
	}
	if ds, err = dsClient.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the DaemonSet's image: %v", err)
	}
	began := time.Now()
	if err := c.api.client.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the old agent pod: %v", err)
	}
	testutil.EventuallyNil(t, func() error {
		_, err := c.api.client.CoreV1().Pods(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("waiting for the kubelet to stop %s: %v", old.Name, err)
	})
	t.Logf("old agent %s gone in %s", old.Name, time.Since(began).Round(time.Millisecond))

	// No agent runs: the pinned probes see this exec alone.
	sess.send(t, "a\n")
	sess.expect(t, "one")
	next := c.runDaemonPod(t, ds)
	if img := next.Spec.Containers[0].Image; img != correlatorNextRef {
		t.Fatalf("the new agent pod runs %s, want %s", img, correlatorNextRef)
	}
	t.Logf("rollout: new agent %s ready %s after the old one was deleted", next.Name, time.Since(began).Round(time.Millisecond))
	sess.send(t, "b\n")
	sess.expect(t, "two")
	sess.wait(t)

	checkExact(t, resp, id, alice.name, "/bin/cat /proc/loadavg")
	checkExact(t, resp, id, alice.name, "/bin/cat /proc/meminfo")
	a := c.agent
	w := a.metric(t, "correlator_capture_unread_window_seconds", "", "")
	if w <= 0 {
		t.Errorf("the new agent reports no unread window (%v s): it did not take over the pinned probes", w)
	}
	t.Logf("the new agent read the probes' %.1f s without an agent, nothing dropped", w)
	for _, m := range []string{"correlator_capture_unread_window_drops", "correlator_capture_ringbuf_drops_total",
		"correlator_capture_procfs_roots"} {
		if n := a.metric(t, m, "", ""); n != 0 {
			t.Errorf("the new agent: %s = %v, want 0", m, n)
		}
	}
	return next
}

// liveKubectl is a kubectl command still running: lines of its stdout
// arrive on out, its stdin takes what the test sends.
type liveKubectl struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    chan string
	args   []string
	stderr string // its stderr's file
}

// errOut is what kubectl wrote to stderr so far.
func (l *liveKubectl) errOut() string {
	b, _ := os.ReadFile(l.stderr)
	return string(b)
}

// start runs kubectl with args, its stdout read line by line.
func (k kubectlAs) start(t *testing.T, args ...string) *liveKubectl {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	stderr, err := os.Create(filepath.Join(t.TempDir(), "kubectl.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kubectl %v: %v", args, err)
	}
	l := &liveKubectl{cmd: cmd, stdin: stdin, out: make(chan string, 64), args: args, stderr: stderr.Name()}
	go func() {
		defer close(l.out)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l.out <- sc.Text()
		}
	}()
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return l
}

// expect waits for the line want, failing on any other or on the end.
func (l *liveKubectl) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got, ok := <-l.out:
		if !ok || got != want {
			t.Fatalf("kubectl %v: got %q (open %v), want the line %q; stderr:\n%s", l.args, got, ok, want, l.errOut())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("kubectl %v: no line %q in 2m; stderr:\n%s", l.args, want, l.errOut())
	}
}

func (l *liveKubectl) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(l.stdin, s); err != nil {
		t.Fatalf("writing to kubectl %v: %v", l.args, err)
	}
}

// wait closes stdin and waits for kubectl to exit 0.
func (l *liveKubectl) wait(t *testing.T) {
	t.Helper()
	l.stdin.Close()
	for range l.out {
	}
	if err := l.cmd.Wait(); err != nil {
		t.Fatalf("kubectl %v: %v; stderr:\n%s", l.args, err, l.errOut())
	}
}
