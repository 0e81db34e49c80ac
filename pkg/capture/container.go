package capture

import "strings"

// ParseCgroupPath extracts the container ID and pod UID from a cgroup path.
// It understands the cgroupfs driver (/kubepods/burstable/pod<uid>/<id>),
// the systemd driver (kubepods-burstable-pod<uid_with_underscores>.slice/
// cri-containerd-<id>.scope) and containerd, CRI-O, docker and podman scope
// names. Runtime helpers (crio-conmon-*) are not containers.
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

var scopePrefixes = []string{"cri-containerd-", "crio-", "docker-", "libpod-", "containerd-"}

func containerIDFromSegment(s string) (string, bool) {
	if isHexID(s) {
		return s, true
	}
	if !strings.HasSuffix(s, ".scope") {
		return "", false
	}
	s = strings.TrimSuffix(s, ".scope")
	if strings.HasPrefix(s, "crio-conmon-") {
		return "", false
	}
	for _, p := range scopePrefixes {
		if id, ok := strings.CutPrefix(s, p); ok && isHexID(id) {
			return id, true
		}
	}
	return "", false
}

func podUIDFromSegment(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".slice")
	i := strings.LastIndex(s, "pod")
	if i < 0 {
		return "", false
	}
	if i > 0 && s[i-1] != '-' {
		return "", false
	}
	uid := strings.ReplaceAll(s[i+3:], "_", "-")
	if !isUUID(uid) {
		return "", false
	}
	return uid, true
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

// isUUID checks the 8-4-4-4-12 hex form kube-apiserver uses for audit IDs.
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
