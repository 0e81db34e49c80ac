package capture

import "strings"

// ParseCgroupPath extracts the container ID and pod UID from a cgroup path.
//
// Pod cgroups, by kubelet cgroup driver:
//
//	cgroupfs: [<root>/]kubepods[/<qos>]/pod<uid>/<container>
//	systemd:  [<root>.slice/]<P>.slice[/<P>-<qos>.slice]/<P>[-<qos>]-pod<uid_with_underscores>.slice/<container>
//
// where <P> is "kubepods", or "<root>-kubepods" under a --cgroup-root
// (kind: kubelet.slice/kubelet-kubepods.slice/...), and <container> is the
// runtime's cgroup: a bare 64-hex ID (containerd, cri-dockerd on cgroupfs),
// crio-<id> (CRI-O on cgroupfs), or <prefix>-<id>.scope on systemd
// (cri-containerd-, crio-, docker-, and libpod- for podman). Runtime helpers
// (crio-conmon-*, libpod-conmon-*) are not containers, nor is a pod or QoS
// slice. The path may be absolute on the host (/sys/fs/cgroup/...,
// /sys/fs/cgroup/memory/...), relative to a cgroup namespace's root
// (/../kubepods-...-pod<uid_>.slice/...), nested under a node container
// (kind), or just the last two elements as the kernel event carries them:
// the innermost container and pod win. Sub-cgroups of a container
// (crio-<id>.scope/container) belong to it.
func ParseCgroupPath(path string) (containerID, podUID string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if containerID == "" {
			if id, ok := containerIDFromSegment(parts[i]); ok {
				containerID = id
				continue
			}
		}
		if uid, ok := podUIDFromSegment(parts[i]); ok {
			podUID = uid
			break
		}
	}
	return containerID, podUID
}

// runtimePrefixes name a container's cgroup, with ".scope" on the systemd
// driver and without on cgroupfs (CRI-O's crio-<id>).
var runtimePrefixes = []string{"cri-containerd-", "crio-", "docker-", "libpod-", "containerd-"}

func containerIDFromSegment(s string) (string, bool) {
	if isHexID(s) {
		return s, true
	}
	s = strings.TrimSuffix(s, ".scope")
	for _, p := range runtimePrefixes {
		// crio-conmon-<id> and libpod-conmon-<id> leave "conmon-<id>",
		// which is no ID.
		if id, ok := strings.CutPrefix(s, p); ok && isHexID(id) {
			return id, true
		}
	}
	return "", false
}

// podUIDFromSegment reads a pod cgroup's name: pod<uid> (cgroupfs), or a
// systemd slice <P>[-<qos>]-pod<uid_with_underscores>.slice whose name
// holds the kubepods element. systemd reads '-' in a slice name as
// hierarchy, so the kubelet spells the UID's dashes as underscores there.
func podUIDFromSegment(s string) (string, bool) {
	if uid, ok := strings.CutPrefix(s, "pod"); ok {
		return uid, isUUID(uid)
	}
	name, ok := strings.CutSuffix(s, ".slice")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(name, "-pod")
	if i < 0 || !hasKubepodsElement(name[:i]) {
		return "", false
	}
	uid := strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
	return uid, isUUID(uid)
}

// hasKubepodsElement reports whether a systemd slice name's dash-separated
// elements include "kubepods".
func hasKubepodsElement(name string) bool {
	for _, e := range strings.Split(name, "-") {
		if e == "kubepods" {
			return true
		}
	}
	return false
}

// isHexID accepts the 64-hex container IDs all CRI runtimes use.
func isHexID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// isUUID checks the 8-4-4-4-12 hex form of pod UIDs (and of
// kube-apiserver's audit IDs).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}
