package nodeharness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The labels the kubelet sets: on the sandbox with the pod's own labels,
// and on every container.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// QoSClass is the kubepods QoS element of the pods' cgroup parent.
const QoSClass = "besteffort"

// CgroupParent is the cgroup parent the kubelet's cgroupfs driver gives a
// best-effort pod: containerd puts each of the pod's containers, the
// sandbox's pause included, at <parent>/<container ID>.
func CgroupParent(podUID string) string {
	return "/kubepods/" + QoSClass + "/pod" + podUID
}

// hostNetwork is the kubelet's namespace options for a hostNetwork pod with
// the default PID and IPC sharing: CNI is never called for it.
func hostNetwork() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

// RunPod runs a pod sandbox as the kubelet would for pod namespace/name
// with the given UID and labels: the labels plus io.kubernetes.pod.* on
// the sandbox, the best-effort cgroup parent, the host network. It returns
// the sandbox ID; the node's teardown stops and removes the pod.
func (n *Node) RunPod(namespace, name, uid string, labels map[string]string) (string, error) {
	return n.runSandbox(namespace, name, uid, labels, false)
}

// runSandbox runs a sandbox as RunPod describes, in the host's PID
// namespace when hostPID (a DaemonSet's hostPID: true).
func (n *Node) runSandbox(namespace, name, uid string, labels map[string]string, hostPID bool) (string, error) {
	l := maps.Clone(labels)
	if l == nil {
		l = map[string]string{}
	}
	l[LabelPodName], l[LabelPodNamespace], l[LabelPodUID] = name, namespace, uid
	logDir := filepath.Join(n.layout.Logs, namespace+"_"+name+"_"+uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", fmt.Errorf("creating pod log directory: %w", err)
	}
	nsOpts := hostNetwork()
	if hostPID {
		nsOpts.Pid = runtimeapi.NamespaceMode_NODE
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		LogDirectory: logDir,
		Labels:       l,
		Annotations:  map[string]string{"kubernetes.io/config.source": "api"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    CgroupParent(uid),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: nsOpts},
		},
	}
	unlock, err := testutil.LockCgroups(unix.LOCK_SH)
	if err != nil {
		return "", err
	}
	defer unlock()
	n.podUIDs = append(n.podUIDs, uid)
	resp, err := n.Runtime.RunPodSandbox(n.ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", fmt.Errorf("running pod sandbox %s/%s: %w", namespace, name, err)
	}
	n.pods[resp.GetPodSandboxId()] = cfg
	return resp.GetPodSandboxId(), nil
}

// StartContainer creates and starts a container in a pod as the kubelet
// would: io.kubernetes.container.name and the pod's io.kubernetes.pod.*
// labels, cmd replacing the image's entrypoint (a pod's `command:`), env
// added to the image's (a pod's `env:`). It returns the container ID.
func (n *Node) StartContainer(podID, name, image string, cmd []string, env ...string) (string, error) {
	sandbox, ok := n.pods[podID]
	if !ok {
		return "", fmt.Errorf("starting container %s: no pod %s on this node", name, podID)
	}
	var kvs []*runtimeapi.KeyValue
	for _, e := range env {
		k, v, _ := cutEnv(e)
		kvs = append(kvs, &runtimeapi.KeyValue{Key: k, Value: v})
	}
	md := sandbox.GetMetadata()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  cmd,
		Envs:     kvs,
		Labels: map[string]string{
			LabelContainerName: name,
			LabelPodName:       md.GetName(),
			LabelPodNamespace:  md.GetNamespace(),
			LabelPodUID:        md.GetUid(),
		},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": "0"},
		LogPath:     filepath.Join(name, "0.log"),
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: hostNetwork()},
		},
	}
	unlock, err := testutil.LockCgroups(unix.LOCK_SH)
	if err != nil {
		return "", err
	}
	defer unlock()
	created, err := n.Runtime.CreateContainer(n.ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID, Config: cfg, SandboxConfig: sandbox})
	if err != nil {
		return "", fmt.Errorf("creating container %s in pod %s/%s: %w", name, md.GetNamespace(), md.GetName(), err)
	}
	id := created.GetContainerId()
	if _, err := n.Runtime.StartContainer(n.ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return "", fmt.Errorf("starting container %s in pod %s/%s: %w", name, md.GetNamespace(), md.GetName(), err)
	}
	return id, nil
}

// CRIExec runs cmd in a container through the CRI's ExecSync, with no
// environment of its own (containerd 1.6's CRI has no ExecRequest.envs):
// the fallback path, where no audit ID reaches the process. It returns
// stdout, stderr and the exit code.
func (n *Node) CRIExec(containerID string, cmd []string) (stdout, stderr string, exitCode int32, err error) {
	resp, err := n.Runtime.ExecSync(n.ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: containerID, Cmd: cmd, Timeout: int64(execTimeout / time.Second)})
	if err != nil {
		return "", "", 0, fmt.Errorf("running ExecSync %q in container %s: %w", cmd, containerID, err)
	}
	return string(resp.GetStdout()), string(resp.GetStderr()), resp.GetExitCode(), nil
}

// ContainerPID is the host PID of a container's init process, from the
// CRI's verbose container status.
func (n *Node) ContainerPID(containerID string) (int, error) {
	resp, err := n.Runtime.ContainerStatus(n.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("reading status of container %s: %w", containerID, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		return 0, fmt.Errorf("reading the pid of container %s from its status: %v", containerID, err)
	}
	return info.Pid, nil
}

// stopPods stops and removes every pod the node ran (their containers go
// with them), then their cgroups.
func (n *Node) stopPods() error {
	var errs []error
	for id, cfg := range n.pods {
		ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
		if _, err := n.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping pod %s/%s: %w", cfg.GetMetadata().GetNamespace(), cfg.GetMetadata().GetName(), err))
		}
		if _, err := n.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			errs = append(errs, fmt.Errorf("removing pod %s/%s: %w", cfg.GetMetadata().GetNamespace(), cfg.GetMetadata().GetName(), err))
		}
		cancel()
		delete(n.pods, id)
	}
	return errors.Join(errs...)
}

// removePodCgroups removes each pod's cgroup, with whatever container
// cgroups are left in it, and the kubepods parents once empty, from every
// mounted hierarchy. A parent another pod or test still uses fails with
// EBUSY or ENOTEMPTY and is left alone.
func (n *Node) removePodCgroups() error {
	if len(n.podUIDs) == 0 {
		return nil
	}
	unlock, err := testutil.LockCgroups(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	mounts, err := testutil.CgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		for _, uid := range n.podUIDs {
			pod := filepath.Join(m, CgroupParent(uid))
			leaves, _ := os.ReadDir(pod)
			for _, l := range leaves {
				if l.IsDir() {
					if err := unix.Rmdir(filepath.Join(pod, l.Name())); err != nil && !errors.Is(err, unix.ENOENT) {
						errs = append(errs, fmt.Errorf("removing cgroup %s: %w", filepath.Join(pod, l.Name()), err))
					}
				}
			}
			if err := unix.Rmdir(pod); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", pod, err))
			}
		}
		for _, parent := range []string{"/kubepods/" + QoSClass, "/kubepods"} {
			if err := unix.Rmdir(filepath.Join(m, parent)); err != nil {
				break // ENOENT, or still in use
			}
		}
	}
	return errors.Join(errs...)
}
