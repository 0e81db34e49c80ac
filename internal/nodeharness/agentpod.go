package nodeharness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/execid/correlator/deploy"
	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
)

// AgentPod is correlator's node agent running as a CRI pod the way the
// Helm chart's DaemonSet asks for it.
type AgentPod struct {
	PodID, ContainerID string
	// Base is the API's URL on the host network, http://127.0.0.1:<port>.
	Base string
	// Token is the API token, from the chart's Secret.
	Token string
	// AuditLog is the audit log file the agent tails (audit.logFiles).
	AuditLog string
	// PinPath is the agent's bpffs pin directory on the host.
	PinPath string
	// DaemonSet and Config are what the chart rendered.
	DaemonSet *appsv1.DaemonSet
	Config    string
}

// chartObjects are the rendered objects an agent pod is built from.
type chartObjects struct {
	ds     *appsv1.DaemonSet
	config *corev1.ConfigMap
	secret *corev1.Secret
}

// AgentAuditLag is the agent pod's --audit-lag.
const AgentAuditLag = 10 * time.Second

// RunAgentPod renders the chart in chartDir with set (helm --set values)
// on top of what the node needs (the image, the node's CRI socket, a
// loopback listen address on a free port, a unique pin path, the state
// and audit log hostPaths under dir), and runs its DaemonSet's pod through
// the CRI with the container's securityContext, args, env, resources and
// mounts as rendered. It waits for the readiness probe to pass. The pod is
// host-network (the node has no CNI) where the chart's is not.
func (n *Node) RunAgentPod(t testing.TB, chartDir, dir string, set ...string) *AgentPod {
	t.Helper()
	testutil.EnsureBPFFS(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	suffix, err := randomID()
	if err != nil {
		t.Fatal(err)
	}
	a := &AgentPod{Base: fmt.Sprintf("http://127.0.0.1:%d", port),
		PinPath:  filepath.Join(testutil.BPFFSPath, "correlator-agentpod-"+suffix[:12]),
		AuditLog: filepath.Join(dir, "audit", "audit.log")}
	t.Cleanup(func() { os.RemoveAll(a.PinPath) })
	sep := strings.LastIndex(ociimage.CorrelatorRef, ":") // the ref names no registry port
	repo, tag := ociimage.CorrelatorRef[:sep], ociimage.CorrelatorRef[sep+1:]
	args := []string{
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag,
		"--set", "criSocket=" + n.Socket,
		"--set", fmt.Sprintf("agent.config.listen=127.0.0.1:%d", port),
		"--set", "agent.config.pin-path=" + a.PinPath,
		"--set", "hostPaths.state=" + filepath.Join(dir, "state"),
		"--set", "audit.logHostPath=" + filepath.Dir(a.AuditLog),
		"--set", "audit.logFiles={" + a.AuditLog + "}",
		// The tests hand records straight to the agent (the log it tails,
		// its webhook): an ID-less exec's answer need not wait for the
		// apiserver's 30 s webhook batching.
		"--set", "agent.config.audit-lag=" + AgentAuditLag.String(),
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	objs, err := renderAgent(chartDir, args)
	if err != nil {
		t.Fatal(err)
	}
	a.DaemonSet, a.Config = objs.ds, objs.config.Data[deploy.AgentConfigKey]
	a.Token = strings.TrimSpace(string(objs.secret.Data["token"]))

	spec := objs.ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("agent DaemonSet has %d containers, want 1", len(spec.Containers))
	}
	mounts, err := hostMounts(spec, spec.Containers[0], objs, filepath.Join(dir, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	// The audit log exists before the agent starts, as the apiserver's would.
	if err := os.WriteFile(a.AuditLog, nil, 0o600); err != nil {
		t.Fatalf("creating the audit log: %v", err)
	}
	ns := objs.ds.Namespace
	a.PodID, err = n.runSandbox(ns, objs.ds.Name+"-node", testutil.RandomUUID(), objs.ds.Spec.Template.Labels, spec.HostPID)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := containerConfig(n.pods[a.PodID], spec.Containers[0], mounts)
	if err != nil {
		t.Fatal(err)
	}
	if a.ContainerID, err = n.createStart(a.PodID, cfg); err != nil {
		t.Fatal(err)
	}
	n.waitAgentReady(t, a, spec.Containers[0])
	return a
}

// renderAgent renders the chart and picks the agent's objects.
func renderAgent(chartDir string, args []string) (chartObjects, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	toolDir, err := deploy.ToolDir()
	if err != nil {
		return chartObjects{}, err
	}
	helm, err := deploy.EnsureHelm(ctx, toolDir)
	if err != nil {
		return chartObjects{}, err
	}
	out, err := deploy.RenderChart(ctx, helm, chartDir, "correlator", "correlator", args...)
	if err != nil {
		return chartObjects{}, err
	}
	dec, err := deploy.NewDecoder()
	if err != nil {
		return chartObjects{}, err
	}
	all, err := dec.DecodeAll(out)
	if err != nil {
		return chartObjects{}, fmt.Errorf("decoding the rendered chart: %w", err)
	}
	var o chartObjects
	for _, obj := range all {
		switch v := obj.(type) {
		case *appsv1.DaemonSet:
			o.ds = v
		case *corev1.ConfigMap:
			if _, ok := v.Data[deploy.AgentConfigKey]; ok {
				o.config = v
			}
		case *corev1.Secret:
			o.secret = v
		}
	}
	if o.ds == nil || o.config == nil || o.secret == nil {
		return o, errors.New("reading the rendered chart: no DaemonSet, agent ConfigMap or token Secret")
	}
	return o, nil
}

// createStart creates and starts a container from a full config.
func (n *Node) createStart(podID string, cfg *runtimeapi.ContainerConfig) (string, error) {
	unlock, err := testutil.LockCgroups(unix.LOCK_SH)
	if err != nil {
		return "", err
	}
	defer unlock()
	created, err := n.Runtime.CreateContainer(n.ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID, Config: cfg, SandboxConfig: n.pods[podID]})
	if err != nil {
		return "", fmt.Errorf("creating container %s: %w", cfg.GetMetadata().GetName(), err)
	}
	id := created.GetContainerId()
	if _, err := n.Runtime.StartContainer(n.ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return id, fmt.Errorf("starting container %s: %w", cfg.GetMetadata().GetName(), err)
	}
	return id, nil
}

// waitAgentReady polls the readiness probe's path until it answers 200,
// failing at once with the container's log if the container exits.
func (n *Node) waitAgentReady(t testing.TB, a *AgentPod, c corev1.Container) {
	t.Helper()
	path := "/readyz"
	if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil {
		path = p.HTTPGet.Path
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	testutil.EventuallyNil(t, func() error {
		st, err := n.Runtime.ContainerStatus(n.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: a.ContainerID})
		if err != nil {
			return err
		}
		if s := st.GetStatus(); s.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			log, _ := os.ReadFile(s.GetLogPath())
			t.Fatalf("agent container exited with %d (%s): log\n%s", s.GetExitCode(), s.GetReason(), log)
		}
		resp, err := hc.Get(a.Base + path)
		if err != nil {
			return fmt.Errorf("waiting for the agent's %s: %w", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("waiting for the agent's %s: %s", path, resp.Status)
		}
		return nil
	})
}

// ContainerLog returns a container's log so far.
func (n *Node) ContainerLog(containerID string) string {
	st, err := n.Runtime.ContainerStatus(n.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
	if err != nil {
		return err.Error()
	}
	b, err := os.ReadFile(st.GetStatus().GetLogPath())
	if err != nil {
		return err.Error()
	}
	return string(b)
}
