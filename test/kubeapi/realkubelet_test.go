//go:build e2ecluster

package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execid/correlator/internal/nodeharness"
	"github.com/execid/correlator/internal/testutil"
)

// A real kubelet, k8s.io/kubernetes's cmd/kubelet at the version this
// module pins (./testdata/kubelet), on the containerd internal/nodeharness
// starts: the cgroupfs driver under a cgroup root of its own (so it never
// sees, or cleans up, other tests' /kubepods pods), cgroup v1 allowed, no
// swap check, a serving certificate the test makes and the apiserver
// checks, a node identity (system:node:<name>, group system:nodes) with
// the system:node ClusterRole bound, since no Node authorizer runs.

// realKubelet is the running kubelet.
type realKubelet struct {
	node string
	// ip is the node's InternalIP: the host's address, where host-network
	// pods are too. The apiserver dials ip:port through the egress proxy.
	ip   string
	port int
	// caFile is the kubelet's serving certificate, for the apiserver's
	// --kubelet-certificate-authority.
	caFile string
	// dir holds its config, certificate and root (short: the root holds
	// pod volume mounts, and unix socket paths are limited).
	dir string
	// cgroup is its cgroup root.
	cgroup string
	log    *syncBuffer
}

// kubeletUser is the node identity in the static token file.
func kubeletUser(node string) apiUser {
	return apiUser{"system:node:" + node, "kubelet-token-" + node, "system:nodes"}
}

// buildKubelet builds ./cmd/kubelet with CGO off (about 120 MB; minutes
// cold, seconds from the build cache).
func buildKubelet(t *testing.T) string {
	t.Helper()
	start := time.Now()
	bin := filepath.Join(t.TempDir(), "kubelet")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/kubelet")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the kubelet: %v\n%s", err, out)
	}
	t.Logf("built the kubelet in %s", time.Since(start).Round(time.Millisecond))
	return bin
}

// hostIP is the first non-loopback IPv4 address of an interface that is
// up: the kubelet refuses a loopback node IP.
func hostIP(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatalf("listing interfaces: %v", err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String()
			}
		}
	}
	t.Fatal("finding the host's address: no interface up with an IPv4 address")
	return ""
}

// newRealKubelet picks the node's address and port, makes its cgroup
// root and writes its serving certificate; before the apiserver starts
// (which needs the CA) and before containerd (whose teardown must come
// before the cgroups' removal).
func newRealKubelet(t *testing.T, node string) *realKubelet {
	t.Helper()
	k := &realKubelet{node: node, ip: hostIP(t), port: freePort(t), log: &syncBuffer{}}
	var err error
	if k.dir, err = os.MkdirTemp("", "kubelet-"); err != nil {
		t.Fatalf("creating the kubelet's directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(k.dir) })
	k.cgroup = cgroupRoot(t)
	k.caFile = filepath.Join(t.TempDir(), "kubelet-ca.crt")
	k.servingCert(t, filepath.Join(k.dir, "kubelet.crt"), filepath.Join(k.dir, "kubelet.key"))
	return k
}

// servingCert writes a self-signed certificate for the node's address and
// loopback to certFile and keyFile; it is its own CA.
func (k *realKubelet) servingCert(t *testing.T, certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := selfSignedServing(t, k.node, net.ParseIP(k.ip), net.IPv4(127, 0, 0, 1))
	writeFile(t, certFile, string(certPEM))
	writeFile(t, keyFile, string(keyPEM))
	writeFile(t, k.caFile, string(certPEM))
}

// selfSignedServing is a serving certificate for cn at ips, its own CA,
// valid for a day, and its key, in PEM.
func selfSignedServing(t *testing.T, cn string, ips ...net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generating %s's key: %v", cn, err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: ips, DNSNames: []string{cn},
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("signing %s's certificate: %v", cn, err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("encoding %s's key: %v", cn, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// apiFlags are the apiserver's flags for reaching this kubelet.
func (k *realKubelet) apiFlags() []string {
	return []string{"--kubelet-certificate-authority=" + k.caFile,
		"--kubelet-preferred-address-types=InternalIP"}
}

// cgroupRoot makes a cgroup of the kubelet's own in every hierarchy (the
// kubelet refuses a cgroup root that does not exist) and removes what is
// left under it when the test ends.
func cgroupRoot(t *testing.T) string {
	t.Helper()
	name := "/correlator-e2e-" + testutil.RandomUUID()[:8]
	dirs, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, d := range append(dirs, "/sys/fs/cgroup") {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
			continue
		}
		if err := os.Mkdir(d+name, 0o755); err != nil {
			t.Fatalf("creating cgroup %s: %v", d+name, err)
		}
		made = append(made, d+name)
	}
	t.Cleanup(func() {
		for _, d := range made {
			removeCgroupTree(t, d)
		}
	})
	return name
}

// removeCgroupTree removes dir's empty cgroups, deepest first.
func removeCgroupTree(t *testing.T, dir string) {
	var all []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			all = append(all, p)
		}
		return nil
	})
	for i := len(all) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(all[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Logf("removing cgroup %s: %v", all[i], err)
		}
	}
}

// kubeletConfig is the KubeletConfiguration: anonymous requests allowed
// on the kubelet's port (the apiserver here has no client certificate
// for it), which listens on loopback only.
func (k *realKubelet) kubeletConfig(dir, socket, cgroup string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: %s
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDirectory: %s
localStorageCapacityIsolation: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Ki", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 2s
serializeImagePulls: false
`, k.port, filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key"), cgroup, socket,
		filepath.Join(dir, "pods"))
}

// start runs the kubelet against s on node's containerd, binds
// system:node to its identity, and waits until the node is Ready.
func (k *realKubelet) start(t *testing.T, s *apiServer, node *nodeharness.Node, bin string) {
	t.Helper()
	start := time.Now()
	ctx := context.Background()
	user := kubeletUser(k.node)
	if _, err := s.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-system-node-" + k.node},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user.name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding system:node to %s: %v", user.name, err)
	}
	s.egress.route(fmt.Sprintf("%s:%d", k.ip, k.port), fmt.Sprintf("127.0.0.1:%d", k.port))

	dir := k.dir
	cfgFile := filepath.Join(dir, "config.yaml")
	writeFile(t, cfgFile, k.kubeletConfig(dir, node.Socket, k.cgroup))
	kc := kubeconfig(t, s, user.name, user.token, "")

	cmd := exec.Command(bin, "--config="+cfgFile, "--kubeconfig="+kc, "--hostname-override="+k.node,
		"--node-ip="+k.ip, "--root-dir="+filepath.Join(dir, "root"), "--cert-dir="+filepath.Join(dir, "pki"), "--v=2")
	restore := keepSysctls(t, kubeletSysctls...)
	cmd.Stdout, cmd.Stderr = k.log, k.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the kubelet: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		k.drain(t, s)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		unmountUnder(t, dir)
		restore()
		if t.Failed() || os.Getenv("CORRELATOR_KUBELET_LOG") != "" {
			t.Logf("kubelet log (tail):\n%s", tail(k.log.String(), 12000))
		}
	})
	testutil.EventuallyNil(t, func() error {
		select {
		case <-exited:
			t.Fatalf("the kubelet exited (%v):\n%s", cmd.ProcessState, tail(k.log.String(), 8000))
		default:
		}
		n, err := s.client.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("waiting for node %s to register: %w", k.node, err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("waiting for node %s to be Ready: %+v", k.node, n.Status.Conditions)
	})
	t.Logf("kubelet: node %s Ready at %s:%d in %s", k.node, k.ip, k.port, time.Since(start).Round(time.Millisecond))
}

// drain deletes every pod on the node and waits until the kubelet has
// stopped them and the API has none, so it unmounts their volumes itself.
func (k *realKubelet) drain(t *testing.T, s *apiServer) {
	ctx := context.Background()
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + k.node}
	pods, err := s.client.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		t.Logf("listing the node's pods: %v", err)
		return
	}
	// Not 0, which removes the object at once: the kubelet stops the
	// containers, then deletes the pod itself.
	one := int64(1)
	for _, p := range pods.Items {
		s.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &one})
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		left, err := s.client.CoreV1().Pods("").List(ctx, sel)
		if err == nil && len(left.Items) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("draining node %s: pods left after 60s", k.node)
}

// unmountUnder lazily unmounts whatever is still mounted under dir.
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var under []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			under = append(under, f[4])
		}
	}
	for i := len(under) - 1; i >= 0; i-- {
		if err := syscall.Unmount(under[i], syscall.MNT_DETACH); err != nil {
			t.Logf("unmounting %s: %v", under[i], err)
		}
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// kubeletSysctls are the kernel settings the kubelet's container manager
// sets on start (vm.overcommit_memory=1, kernel.panic=10,
// kernel.panic_on_oops=1): the test puts the host's values back.
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// keepSysctls reads the settings now and returns a function that writes
// them back.
func keepSysctls(t *testing.T, names ...string) func() {
	t.Helper()
	saved := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile("/proc/sys/" + n)
		if err != nil {
			t.Fatalf("reading sysctl %s: %v", n, err)
		}
		saved[n] = b
	}
	return func() {
		for n, b := range saved {
			if err := os.WriteFile("/proc/sys/"+n, b, 0o644); err != nil {
				t.Errorf("restoring sysctl %s: %v", n, err)
			}
		}
	}
}
