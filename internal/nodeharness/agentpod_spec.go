package nodeharness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's part in running the agent's pod: a rendered pod spec
// translated to CRI mounts and a CRI container config.

// hostMounts maps the container's volumeMounts to CRI mounts as the kubelet
// would: a hostPath as itself (checked or created per its type), a
// ConfigMap or Secret written out as files under dir, an emptyDir as a
// fresh directory under dir.
func hostMounts(spec corev1.PodSpec, c corev1.Container, objs chartObjects, dir string) ([]*runtimeapi.Mount, error) {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	var mounts []*runtimeapi.Mount
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("mounting %s: no volume %q", vm.MountPath, vm.Name)
		}
		host := filepath.Join(dir, v.Name)
		var err error
		switch {
		case v.HostPath != nil:
			host = v.HostPath.Path
			err = checkHostPath(v.HostPath)
		case v.ConfigMap != nil:
			err = writeFiles(host, stringData(objs.config.Data), v.ConfigMap.Items, v.ConfigMap.DefaultMode)
		case v.Secret != nil:
			err = writeFiles(host, objs.secret.Data, v.Secret.Items, v.Secret.DefaultMode)
		case v.EmptyDir != nil:
			err = os.MkdirAll(host, 0o777)
		default:
			err = errors.New("unsupported volume source")
		}
		if err != nil {
			return nil, fmt.Errorf("preparing volume %s: %w", v.Name, err)
		}
		mounts = append(mounts, &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: host,
			Readonly: vm.ReadOnly, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE})
	}
	return mounts, nil
}

func checkHostPath(h *corev1.HostPathVolumeSource) error {
	typ := corev1.HostPathUnset
	if h.Type != nil {
		typ = *h.Type
	}
	var st unix.Stat_t
	statErr := unix.Stat(h.Path, &st)
	switch typ {
	case corev1.HostPathDirectoryOrCreate:
		return os.MkdirAll(h.Path, 0o755)
	case corev1.HostPathDirectory:
		if statErr != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("checking hostPath %s: not a directory (%v)", h.Path, statErr)
		}
	case corev1.HostPathSocket:
		if statErr != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return fmt.Errorf("checking hostPath %s: not a socket (%v)", h.Path, statErr)
		}
	case corev1.HostPathUnset:
	default:
		return fmt.Errorf("checking hostPath %s: type %s not handled", h.Path, typ)
	}
	return nil
}

func stringData(m map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}

// writeFiles writes a ConfigMap's or Secret's keys (or only items) as files.
func writeFiles(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if items == nil {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("writing %s: no key %q", it.Path, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		if err := os.WriteFile(filepath.Join(dir, it.Path), v, m); err != nil {
			return err
		}
	}
	return nil
}

// containerConfig is the kubelet's CRI container config for c: the image's
// entrypoint with c's args, c's env (limits.memory resolved), its resources
// and its securityContext, on the pod's host namespaces.
func containerConfig(sandbox *runtimeapi.PodSandboxConfig, c corev1.Container, mounts []*runtimeapi.Mount) (*runtimeapi.ContainerConfig, error) {
	var envs []*runtimeapi.KeyValue
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil {
			if f.ResourceFieldRef == nil || f.ResourceFieldRef.Resource != "limits.memory" {
				return nil, fmt.Errorf("resolving env %s: only resourceFieldRef limits.memory is handled", e.Name)
			}
			v = strconv.FormatInt(c.Resources.Limits.Memory().Value(), 10)
		}
		envs = append(envs, &runtimeapi.KeyValue{Key: e.Name, Value: v})
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		return nil, errors.New("reading the agent's securityContext: none, or no capabilities")
	}
	lsc := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: sandbox.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		Capabilities:     &runtimeapi.Capability{},
		Privileged:       sc.Privileged != nil && *sc.Privileged,
		ReadonlyRootfs:   sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem,
		NoNewPrivs:       sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
	}
	for _, cp := range sc.Capabilities.Add {
		lsc.Capabilities.AddCapabilities = append(lsc.Capabilities.AddCapabilities, string(cp))
	}
	for _, cp := range sc.Capabilities.Drop {
		lsc.Capabilities.DropCapabilities = append(lsc.Capabilities.DropCapabilities, string(cp))
	}
	if sc.RunAsUser != nil {
		lsc.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
	}
	if sc.RunAsGroup != nil {
		lsc.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
	}
	if p := sc.SeccompProfile; p != nil {
		prof, err := securityProfile(string(p.Type), p.LocalhostProfile)
		if err != nil {
			return nil, fmt.Errorf("reading the seccomp profile: %w", err)
		}
		lsc.Seccomp = prof
	}
	if p := sc.AppArmorProfile; p != nil {
		prof, err := securityProfile(string(p.Type), p.LocalhostProfile)
		if err != nil {
			return nil, fmt.Errorf("reading the AppArmor profile: %w", err)
		}
		lsc.Apparmor = prof
	}
	res := &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuShares: 2, OomScoreAdj: 1000}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		res.CpuShares = max(2, q.MilliValue()*1024/1000)
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		res.CpuQuota = q.MilliValue() * 100000 / 1000
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		res.MemoryLimitInBytes = q.Value()
	}
	md := sandbox.GetMetadata()
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: c.Name},
		Image:    &runtimeapi.ImageSpec{Image: c.Image},
		Command:  c.Command,
		Args:     c.Args,
		Envs:     envs,
		Mounts:   mounts,
		Labels: map[string]string{
			LabelContainerName: c.Name,
			LabelPodName:       md.GetName(),
			LabelPodNamespace:  md.GetNamespace(),
			LabelPodUID:        md.GetUid(),
		},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": "0"},
		LogPath:     filepath.Join(c.Name, "0.log"),
		Linux:       &runtimeapi.LinuxContainerConfig{Resources: res, SecurityContext: lsc},
	}, nil
}

// securityProfile maps a pod spec's seccomp or AppArmor profile type to
// the CRI's, as the kubelet does (a Localhost profile is a path on the node).
// The harness has no kubelet seccomp root: a Localhost profile must be an
// absolute path.
func securityProfile(typ string, localhost *string) (*runtimeapi.SecurityProfile, error) {
	switch corev1.SeccompProfileType(typ) {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case corev1.SeccompProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case corev1.SeccompProfileTypeLocalhost:
		if localhost == nil || !filepath.IsAbs(*localhost) {
			return nil, fmt.Errorf("profile type Localhost: %v is not an absolute path", localhost)
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *localhost}, nil
	}
	return nil, fmt.Errorf("profile type %q not handled", typ)
}
