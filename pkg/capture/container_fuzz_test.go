package capture

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// cgroupLayout is how a kubelet cgroup driver and a runtime name a cgroup,
// as path elements below the hierarchy's root.
type cgroupLayout struct {
	name  string
	elems func(uid, cid string) []string
	// pod is where the pod element sits, counted from the leaf (0: the
	// leaf is the pod's cgroup, 1: its parent); -1 when there is none.
	pod int
	// ctr says whether the path names a container (its ID is cid).
	ctr bool
}

func underscores(uid string) string { return strings.ReplaceAll(uid, "-", "_") }

// cgroupLayouts are the kubelet drivers' and runtimes' layouts, and host
// cgroups next to them that name neither a pod nor a container.
var cgroupLayouts = []cgroupLayout{
	{"cgroupfs-burstable-containerd", func(u, c string) []string {
		return []string{"kubepods", "burstable", "pod" + u, c}
	}, 1, true},
	{"cgroupfs-guaranteed-containerd", func(u, c string) []string {
		return []string{"kubepods", "pod" + u, c}
	}, 1, true},
	{"cgroupfs-besteffort-crio", func(u, c string) []string {
		return []string{"kubepods", "besteffort", "pod" + u, "crio-" + c}
	}, 1, true},
	{"cgroupfs-crio-conmon", func(u, c string) []string {
		return []string{"kubepods", "burstable", "pod" + u, "crio-conmon-" + c}
	}, 1, false},
	{"cgroupfs-pod", func(u, c string) []string {
		return []string{"kubepods", "burstable", "pod" + u}
	}, 0, false},
	{"systemd-burstable-containerd", func(u, c string) []string {
		return []string{"kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod" + underscores(u) + ".slice", "cri-containerd-" + c + ".scope"}
	}, 1, true},
	{"systemd-besteffort-crio", func(u, c string) []string {
		return []string{"kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod" + underscores(u) + ".slice", "crio-" + c + ".scope"}
	}, 1, true},
	{"systemd-guaranteed-docker", func(u, c string) []string {
		return []string{"kubepods.slice", "kubepods-pod" + underscores(u) + ".slice", "docker-" + c + ".scope"}
	}, 1, true},
	{"systemd-crio-container-subcgroup", func(u, c string) []string {
		return []string{"kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod" + underscores(u) + ".slice", "crio-" + c + ".scope", "container"}
	}, 2, true},
	{"systemd-crio-conmon", func(u, c string) []string {
		return []string{"kubepods.slice", "kubepods-pod" + underscores(u) + ".slice", "crio-conmon-" + c + ".scope"}
	}, 1, false},
	{"systemd-pod-slice", func(u, c string) []string {
		return []string{"kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod" + underscores(u) + ".slice"}
	}, 0, false},
	{"systemd-kind-cgroup-root", func(u, c string) []string {
		return []string{"kubelet.slice", "kubelet-kubepods.slice", "kubelet-kubepods-burstable.slice", "kubelet-kubepods-burstable-pod" + underscores(u) + ".slice", "cri-containerd-" + c + ".scope"}
	}, 1, true},
	{"host-kubepods-qos-slice", func(u, c string) []string {
		return []string{"kubepods.slice", "kubepods-burstable.slice"}
	}, -1, false},
	{"host-cgroupfs-qos", func(u, c string) []string {
		return []string{"kubepods", "besteffort"}
	}, -1, false},
	{"host-service", func(u, c string) []string {
		return []string{"system.slice", "containerd.service"}
	}, -1, false},
	{"host-user-session", func(u, c string) []string {
		return []string{"user.slice", "user-1000.slice", "session-3.scope"}
	}, -1, false},
}

// cgroupPrefixes are where a path is read from: a hierarchy's root, the
// host's or a DaemonSet's mount of it, a cgroup namespace (relative to its
// root), or below a node container (kind), whose own ID is what a path
// names when the rest names no container and no pod.
var cgroupPrefixes = []struct {
	path string
	node string
}{
	{"", ""},
	{"/sys/fs/cgroup", ""},
	{"/sys/fs/cgroup/unified", ""},
	{"/sys/fs/cgroup/memory", ""},
	{"/host/sys/fs/cgroup", ""},
	{"/..", ""},
	{"/../../..", ""},
	{"/docker/" + nodeID, nodeID},
	{"/system.slice/docker-" + nodeID + ".scope", nodeID},
}

const nodeID = "9d5b1a3f0e7c2d4b6a8f1e3c5d7b9a0f2e4c6d8b0a1f3e5c7d9b2a4f6e8c0d1b"

// layoutIDs makes a pod UID and a container ID from fuzz bytes.
func layoutIDs(id []byte) (uid, cid string) {
	b := make([]byte, 48)
	for i := range b {
		if len(id) > 0 {
			b[i] = id[i%len(id)] ^ byte(i/len(id))
		}
	}
	u := hex.EncodeToString(b[:16])
	return u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:], hex.EncodeToString(b[16:])
}

// FuzzCgroupLayout builds a path in each layout from any IDs and checks
// that every view of it (the whole path under every prefix, with a
// trailing slash, and the parent/leaf pair the kernel event carries) gives
// back exactly the IDs put in.
func FuzzCgroupLayout(f *testing.F) {
	for _, s := range cgroupLayoutSeeds() {
		f.Add(s[0].(uint32), s[1].(uint32), s[2].([]byte))
	}
	f.Fuzz(func(t *testing.T, layout, prefix uint32, id []byte) {
		l := cgroupLayouts[layout%uint32(len(cgroupLayouts))]
		pre := cgroupPrefixes[prefix%uint32(len(cgroupPrefixes))]
		uid, cid := layoutIDs(id)
		elems := l.elems(uid, cid)

		wantCID, wantPod := "", ""
		if l.ctr {
			wantCID = cid
		} else if l.pod < 0 {
			wantCID = pre.node
		}
		if l.pod >= 0 {
			wantPod = uid
		}
		full := pre.path + "/" + strings.Join(elems, "/")
		for _, p := range []string{full, full + "/"} {
			if gotCID, gotPod := ParseCgroupPath(p); gotCID != wantCID || gotPod != wantPod {
				t.Errorf("%s: ParseCgroupPath(%q)\n = (%q, %q)\nwant (%q, %q)", l.name, p, gotCID, gotPod, wantCID, wantPod)
			}
		}

		// The decoder's view: the container cgroup's parent and leaf.
		pair := joinCgroup(elems[len(elems)-2], elems[len(elems)-1])
		wantCID, wantPod = "", ""
		if l.ctr {
			wantCID = cid
		}
		if l.pod == 0 || l.pod == 1 {
			wantPod = uid
		}
		if gotCID, gotPod := ParseCgroupPath(pair); gotCID != wantCID || gotPod != wantPod {
			t.Errorf("%s: ParseCgroupPath(%q) (parent/leaf)\n = (%q, %q)\nwant (%q, %q)", l.name, pair, gotCID, gotPod, wantCID, wantPod)
		}
	})
}

// cgroupLayoutSeeds has a seed per layout, each read from another prefix.
func cgroupLayoutSeeds() map[string][]any {
	out := map[string][]any{}
	id, _ := hex.DecodeString(strings.ReplaceAll(fxPodUID, "-", "") + fxCtrID)
	for i, l := range cgroupLayouts {
		p := i % len(cgroupPrefixes)
		out[fmt.Sprintf("%s-prefix%d", l.name, p)] = []any{uint32(i), uint32(p), id}
	}
	return out
}

// cgroupPathSeeds are FuzzParseCgroupPath's committed seeds: real paths.
func cgroupPathSeeds() map[string][]any {
	uidU := underscores(fxPodUID)
	return map[string][]any{
		"cgroupfs-burstable": {"/kubepods/burstable/pod" + fxPodUID + "/" + fxCtrID},
		"systemd-containerd": {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + fxCtrID + ".scope"},
		"crio-conmon":        {"/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + fxCtrID + ".scope"},
		"host-session":       {"/user.slice/user-1000.slice/session-3.scope"},
		"v2-host-path":       {"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + fxCtrID + ".scope"},
		"cgroupns-relative":  {"/../../kubepods-burstable-pod" + uidU + ".slice/docker-" + fxCtrID + ".scope"},
		"kind-systemd":       {"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + uidU + ".slice/cri-containerd-" + fxCtrID + ".scope"},
		"crio-cgroupfs":      {"/kubepods/pod" + fxPodUID + "/crio-" + fxCtrID},
		"host-kubepods":      {"/kubepods.slice/kubepods-burstable.slice"},
	}
}

func FuzzParseCgroupPath(f *testing.F) {
	for _, s := range cgroupPathSeeds() {
		f.Add(s[0].(string))
	}
	for _, p := range []string{"/system.slice/docker-" + fxCtrID + ".scope", "", "/", "//pod/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		cid, pod := ParseCgroupPath(path)
		elems := strings.Split(path, "/")
		if cid != "" && !anyElem(elems, func(e string) bool { return namesContainer(e, cid) }) {
			t.Errorf("ParseCgroupPath(%q) container %q: no element of the path names it", path, cid)
		}
		if pod != "" && (!isUUID(pod) || !anyElem(elems, func(e string) bool { return namesPod(e, pod) })) {
			t.Errorf("ParseCgroupPath(%q) pod %q: no element of the path names it", path, pod)
		}
		// Where the path is read from, and a trailing slash, change nothing.
		for _, p := range []string{path + "/", "/sys/fs/cgroup/" + path, "/sys/fs/cgroup/unified/" + path, "/../" + path} {
			if c, u := ParseCgroupPath(p); c != cid || u != pod {
				t.Errorf("ParseCgroupPath(%q) = (%q, %q), but (%q, %q) for %q", p, c, u, cid, pod, path)
			}
		}
	})
}

func anyElem(elems []string, f func(string) bool) bool {
	for _, e := range elems {
		if f(e) {
			return true
		}
	}
	return false
}

// namesContainer is the reference: e is the ID, or a runtime prefix and
// the ID with or without ".scope", and never conmon's.
func namesContainer(e, cid string) bool {
	if !isHexID(cid) {
		return false
	}
	if e == cid {
		return true
	}
	for _, p := range []string{"cri-containerd-", "crio-", "docker-", "libpod-", "containerd-"} {
		if e == p+cid || e == p+cid+".scope" {
			return true
		}
	}
	return false
}

// namesPod is the reference: pod<uid>, or a slice ending -pod<uid> (dashes
// as underscores, or not) whose name has a kubepods element.
func namesPod(e, uid string) bool {
	if e == "pod"+uid {
		return true
	}
	for _, u := range []string{uid, underscores(uid)} {
		if name, ok := strings.CutSuffix(e, "-pod"+u+".slice"); ok && strings.Contains("-"+name+"-", "-kubepods-") {
			return true
		}
	}
	return false
}
