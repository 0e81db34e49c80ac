//go:build e2ecluster

package kubeapi

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execid/correlator/internal/nodeharness"
	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
)

// The one-node cluster of `make e2e-cluster`: kube-apiserver in process
// with both audit backends, a real kubelet on nodeharness's containerd,
// correlator's chart applied through the API, its agent pod started by
// the kubelet from the offline image.

// realCluster is the running cluster.
type realCluster struct {
	api     *apiServer
	node    *nodeharness.Node
	kubelet *realKubelet
	// auditLog is the apiserver's log backend: the file the agent tails.
	auditLog string
	// correlator is the static cmd/correlator (the image's binary, the
	// bridge and, linked as kubectl-correlator, the plugin).
	correlator string
	// agent is the chart's agent, rendered before the apiserver starts
	// (its webhook backend needs the agent's token and port).
	agent *chartAgent
	// servingCA and servingHost are what pods trust and dial for the
	// apiserver: its serving certificate's root and a loopback name in it.
	servingCA, servingHost string
	started                time.Time
}

// servingCA reads the apiserver's serving certificate chain: its root
// (the admin config trusts the loopback client's CA instead, which the
// apiserver serves only for its own SNI name) and a loopback name it is
// valid for.
func (c *realCluster) readServingCA(t *testing.T) {
	t.Helper()
	addr := strings.TrimPrefix(c.api.admin.Host, "https://")
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("reading the apiserver's serving certificate: %v", err)
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	leaf, root := certs[0], certs[len(certs)-1]
	c.servingCA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw}))
	for _, ip := range leaf.IPAddresses {
		if ip.IsLoopback() && ip.To4() != nil {
			c.servingHost = ip.String()
			return
		}
	}
	if slices.Contains(leaf.DNSNames, "localhost") {
		c.servingHost = "localhost"
		return
	}
	t.Fatalf("the apiserver's serving certificate names no loopback address: %v %v", leaf.IPAddresses, leaf.DNSNames)
}

// buildStaticCorrelator builds cmd/correlator with CGO off (the image
// needs it static) and writes its OCI archives: CorrelatorRef, and
// correlatorNextRef linked as another version (the rollout's image).
func buildStaticCorrelator(t *testing.T, dir string) (bin string, archives []string) {
	t.Helper()
	start := time.Now()
	bin = filepath.Join(dir, "correlator")
	for _, img := range []struct{ ref, version string }{{ociimage.CorrelatorRef, "e2e"}, {correlatorNextRef, "e2e-next"}} {
		out := filepath.Join(dir, img.version)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-X main.version="+img.version, "-o", out, "./cmd/correlator")
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building correlator: %v\n%s", err, out)
		}
		archive := out + ".oci.tar"
		if err := ociimage.WriteCorrelator(archive, img.ref, out); err != nil {
			t.Fatal(err)
		}
		archives = append(archives, archive)
	}
	if err := os.Rename(filepath.Join(dir, "e2e"), bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("built correlator and its two images in %s", time.Since(start).Round(time.Millisecond))
	return bin, archives
}

// auditWebhookFlags turn the webhook backend on, posting to url with the
// agent's API token, in batches of at most a second, trusting ca (TLS:
// client-go sends a kubeconfig's token over nothing else).
func auditWebhookFlags(t *testing.T, url, token string, ca []byte) []string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "audit-webhook.kubeconfig")
	writeFile(t, kc, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: correlator
  cluster: {server: %q, certificate-authority-data: %q}
contexts:
- name: correlator
  context: {cluster: correlator, user: kube-apiserver}
current-context: correlator
users:
- name: kube-apiserver
  user: {token: %q}
`, url, base64.StdEncoding.EncodeToString(ca), token))
	return []string{"--audit-webhook-config-file=" + kc, "--audit-webhook-mode=batch",
		"--audit-webhook-batch-max-wait=1s", "--audit-webhook-initial-backoff=1s"}
}

// clusterBuild is what every cluster of a run shares: the kubelet,
// correlator and its images, runc from the Go module proxy.
type clusterBuild struct {
	kubelet, correlator, runc string
	archives                  []string
}

func buildCluster(t *testing.T) *clusterBuild {
	t.Helper()
	b := &clusterBuild{kubelet: buildKubelet(t), runc: buildRunc(t)}
	b.correlator, b.archives = buildStaticCorrelator(t, t.TempDir())
	return b
}

// startRealCluster starts containerd (its CRI running runc; empty:
// Debian's), renders the agent's chart, starts the apiserver (users, both
// audit backends) and the kubelet.
func startRealCluster(t *testing.T, b *clusterBuild, runc string, users []apiUser, set ...string) *realCluster {
	t.Helper()
	testutil.RequireRoot(t)
	c := &realCluster{started: time.Now(), correlator: b.correlator}
	c.kubelet = newRealKubelet(t, "node-a")
	c.node = nodeharness.Start(t, nodeharness.Options{Archives: b.archives, Runc: runc})
	c.node.WaitImage(ociimage.CorrelatorRef)
	c.node.WaitImage(correlatorNextRef)
	// A network list, so that the CRI reports its network ready and the
	// kubelet its node Ready; every pod here is host-network, and none
	// calls the plugin.
	writeFile(t, filepath.Join(c.node.CNIConfDir(), "10-e2e.conflist"),
		`{"cniVersion": "0.4.0", "name": "e2e", "plugins": [{"type": "bridge", "bridge": "e2e0"}]}`)
	t.Logf("containerd ready: %+v", c.node.Timings)

	c.auditLog = filepath.Join(t.TempDir(), "audit", "audit.log")
	if err := os.MkdirAll(filepath.Dir(c.auditLog), 0o755); err != nil {
		t.Fatal(err)
	}
	c.agent = renderAgent(t, c.node, c.kubelet.ip, c.auditLog, t.TempDir(), set...)
	// The probes stay pinned, and attached, after the agents: the chart's
	// uninstall hook needs a Job controller, so the test runs what it runs.
	t.Cleanup(func() { c.uninstall(t) })
	flags := append(auditFlags(t, c.auditLog), c.kubelet.apiFlags()...)
	flags = append(flags, auditWebhookFlags(t, c.agent.webhookURL("127.0.0.1"), c.agent.token, c.agent.tlsCert)...)
	start := time.Now()
	c.api = startAPIServer(t, append(users, kubeletUser(c.kubelet.node)), flags...)
	t.Logf("kube-apiserver ready in %s", time.Since(start).Round(time.Millisecond))
	c.readServingCA(t)
	c.kubelet.start(t, c.api, c.node, b.kubelet)
	return c
}

// namespace creates ns with its default service account and the
// kube-root-ca.crt ConfigMap.
func (c *realCluster) namespace(t *testing.T, ns string) {
	t.Helper()
	createNamespace(t, c.api, ns)
	c.publishRootCA(t, ns)
}

// publishRootCA creates ns's kube-root-ca.crt ConfigMap, as the
// controller-manager would (the service account token volume projects it).
func (c *realCluster) publishRootCA(t *testing.T, ns string) {
	t.Helper()
	if _, err := c.api.client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": c.servingCA},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("publishing kube-root-ca.crt in %s: %v", ns, err)
	}
}

// workload creates a busybox pod on the node, host network, the offline
// image, and waits until the kubelet runs it.
func (c *realCluster) workload(t *testing.T, ns, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	no, one := false, int64(1)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: c.kubelet.node, HostNetwork: true, AutomountServiceAccountToken: &no,
			TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{Name: "app", Image: ociimage.BusyboxRef,
				ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}}}
	if _, err := c.api.client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return c.waitRunning(t, ns, name)
}

// waitRunning waits until the pod is Running and Ready, failing at once
// if a container is waiting on an error.
func (c *realCluster) waitRunning(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	start := time.Now()
	var pod *corev1.Pod
	testutil.EventuallyNil(t, func() error {
		p, err := c.api.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && (strings.HasSuffix(w.Reason, "Error") || w.Reason == "ErrImageNeverPull") {
				t.Fatalf("pod %s/%s: container %s: %s: %s", ns, name, s.Name, w.Reason, w.Message)
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("waiting for pod %s/%s to be ready: %s %+v", ns, name, p.Status.Phase, p.Status.ContainerStatuses)
	})
	t.Logf("pod %s/%s running (uid %s, ip %s) in %s", ns, name, pod.UID, pod.Status.PodIP,
		time.Since(start).Round(time.Millisecond))
	return pod
}

// pluginAs runs `kubectl correlator` as one user: kubectl finds the
// plugin on PATH, the kubeconfig goes by $KUBECONFIG (kubectl refuses
// flags before a plugin's name).
type pluginAs struct{ kubectl, kubeconfig string }

func (p pluginAs) run(t *testing.T, args ...string) result {
	t.Helper()
	r := p.quiet(t, args...)
	t.Logf("%s", r)
	return r
}

// quiet runs args without logging the output: for polls.
func (p pluginAs) quiet(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.kubectl, append([]string{"correlator"}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "KUBECONFIG=" + p.kubeconfig}
	return runCommand(t, cmd, "", args)
}

func (p pluginAs) must(t *testing.T, args ...string) result {
	t.Helper()
	r := p.run(t, args...)
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	return r
}

// plugin is `kubectl correlator` as user.
func (c *realCluster) plugin(t *testing.T, u apiUser, ns string) pluginAs {
	t.Helper()
	k := c.kubectl(t, u, ns)
	return pluginAs{kubectl: k.bin, kubeconfig: k.kubeconfig}
}

// containerLog is the log of ns/pod's first container, from containerd.
func (c *realCluster) containerLog(t *testing.T, ns, pod string) string {
	t.Helper()
	p, err := c.api.client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 {
		return fmt.Sprintf("(no container status for %s/%s: %v)", ns, pod, err)
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	return c.node.ContainerLog(id)
}

// kubectl is the real kubectl (on PATH) as user.
func (c *realCluster) kubectl(t *testing.T, u apiUser, ns string) kubectlAs {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("finding kubectl: %v", err)
	}
	return kubectlAs{bin: bin, kubeconfig: kubeconfig(t, c.api, u.name, u.token, ns)}
}

// uninstall runs `correlator uninstall` for the agents' pin path, as the
// chart's pre-delete hook does on every node, and checks nothing is left.
func (c *realCluster) uninstall(t *testing.T) {
	out, err := exec.Command(c.correlator, "uninstall", "--pin-path", c.agent.pinPath).CombinedOutput()
	if err != nil {
		t.Errorf("correlator uninstall --pin-path %s: %v\n%s", c.agent.pinPath, err, out)
	}
	if _, err := os.Stat(c.agent.pinPath); !os.IsNotExist(err) {
		t.Errorf("%s is still there after correlator uninstall (%v)", c.agent.pinPath, err)
	}
}
