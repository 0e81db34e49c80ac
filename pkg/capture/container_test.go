package capture

import (
	"strings"
	"testing"
)

func TestParseCgroupPath(t *testing.T) {
	const (
		uid = fxPodUID
		cid = fxCtrID
	)
	uidU := strings.ReplaceAll(uid, "-", "_") // the systemd driver's spelling
	tests := []struct {
		name    string
		path    string
		wantCID string
		wantPod string
	}{
		// cgroupfs driver: containerd and cri-dockerd name the container
		// cgroup by its bare ID, CRI-O crio-<id> (and conmon crio-conmon-<id>).
		{"cgroupfs burstable", "/kubepods/burstable/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs besteffort", "/kubepods/besteffort/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs CRI-O", "/kubepods/burstable/pod" + uid + "/crio-" + cid, cid, uid},
		{"cgroupfs CRI-O conmon is not a container", "/kubepods/burstable/pod" + uid + "/crio-conmon-" + cid, "", uid},
		{"cgroupfs trailing slash", "/kubepods/burstable/pod" + uid + "/" + cid + "/", cid, uid},
		{"cgroupfs no leading slash", "kubepods/burstable/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs under a cgroup root", "/kubelet/kubepods/burstable/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs v1 host path", "/sys/fs/cgroup/memory/kubepods/burstable/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs v2 host path", "/sys/fs/cgroup/kubepods/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs hybrid unified host path", "/sys/fs/cgroup/unified/kubepods/besteffort/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs kind node on cgroup v1", "/docker/" + strings.Repeat("ab", 32) + "/kubepods/besteffort/pod" + uid + "/" + cid, cid, uid},
		{"parent and leaf only, as the decoder joins them", "pod" + uid + "/" + cid, cid, uid},
		{"pod cgroup itself", "/kubepods/burstable/pod" + uid, "", uid},

		// systemd driver
		{
			"systemd burstable containerd",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd guaranteed containerd",
			"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd besteffort containerd",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd CRI-O",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd CRI-O guaranteed",
			"/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd CRI-O conmon is not a container",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope",
			"", uid,
		},
		{
			"systemd CRI-O container sub-cgroup",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope/container",
			cid, uid,
		},
		{
			"systemd cri-dockerd",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/docker-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd v2 host path",
			"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd v1 memory host path",
			"/sys/fs/cgroup/memory/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd from the container's cgroup namespace (/proc/<pid>/cgroup of another cgroup)",
			"/../../kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd kind node (cgroupRoot /kubelet)",
			"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd kind node seen from the host (cgroup v2)",
			"/system.slice/docker-" + strings.Repeat("ab", 32) + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"systemd parent and leaf, as the decoder joins them",
			"kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{"systemd pod slice without container", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice", "", uid},
		{"systemd guaranteed pod slice without container", "/kubepods.slice/kubepods-pod" + uidU + ".slice", "", uid},

		// other runtimes, no pod
		{"docker cgroupfs", "/docker/" + cid, cid, ""},
		{"docker systemd", "/system.slice/docker-" + cid + ".scope", cid, ""},
		{"podman", "/machine.slice/libpod-" + cid + ".scope", cid, ""},
		{"podman cgroupfs", "/libpod_parent/libpod-" + cid, cid, ""},
		{"podman conmon is not a container", "/machine.slice/libpod-conmon-" + cid + ".scope", "", ""},
		{"containerd without kubernetes", "/system.slice/containerd-" + cid + ".scope", cid, ""},

		// host cgroups: neither a container nor a pod
		{"host user session", "/user.slice/user-1000.slice/session-3.scope", "", ""},
		{"host user service", "/user.slice/user-1000.slice/user@1000.service/app.slice/dbus.service", "", ""},
		{"host service", "/system.slice/containerd.service", "", ""},
		{"host service v2 host path", "/sys/fs/cgroup/system.slice/kubelet.service", "", ""},
		{"host kubepods slice", "/kubepods.slice", "", ""},
		{"host kubepods QoS slice", "/kubepods.slice/kubepods-burstable.slice", "", ""},
		{"host kubepods besteffort slice", "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice", "", ""},
		{"host cgroupfs kubepods", "/kubepods", "", ""},
		{"host cgroupfs QoS", "/kubepods/burstable", "", ""},
		{"host kind kubelet slice", "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice", "", ""},
		{"cgroup namespace root", "/", "", ""},
		{"empty", "", "", ""},

		// malformed
		{"63 hex", "/kubepods/burstable/pod" + uid + "/" + cid[:63], "", uid},
		{"65 hex", "/kubepods/burstable/pod" + uid + "/" + cid + "0", "", uid},
		{"non-hex", "/kubepods/burstable/pod" + uid + "/" + cid[:63] + "g", "", uid},
		{"scope with 63 hex", "/system.slice/docker-" + cid[:63] + ".scope", "", ""},
		{"unknown scope prefix", "/system.slice/runc-" + cid + ".scope", "", ""},
		{"scope suffix twice", "/system.slice/docker-" + cid + ".scope.scope", "", ""},
		{"pod uid too short", "/kubepods/burstable/pod" + uid[:35] + "/" + cid, cid, ""},
		{"pod uid non-hex", "/kubepods/burstable/pod" + uid[:35] + "z/" + cid, cid, ""},
		{"pod uid misplaced dash", "/kubepods/burstable/pod" + strings.Replace(uid, "-", "", 1) + "-/" + cid, cid, ""},
		{"pod word inside another word", "/kubepods/burstable/apod" + uid + "/" + cid, cid, ""},
		{"pod segment without uid", "/kubepods/burstable/pod/" + cid, cid, ""},
		{"cgroupfs pod with a slice suffix", "/kubepods/burstable/pod" + uid + ".slice/" + cid, cid, ""},
		{"systemd pod slice without the .slice suffix", "/kubepods.slice/kubepods-pod" + uidU + "/cri-containerd-" + cid + ".scope", cid, ""},
		{"systemd pod slice outside kubepods", "/user.slice/user-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", cid, ""},
		{"systemd pod slice under a kubepods lookalike", "/kubepodsx.slice/kubepodsx-pod" + uidU + ".slice/" + cid, cid, ""},
		{"systemd pod uid too short", "/kubepods.slice/kubepods-pod" + uidU[:35] + ".slice/cri-containerd-" + cid + ".scope", cid, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cid, pod := ParseCgroupPath(tc.path)
			if cid != tc.wantCID || pod != tc.wantPod {
				t.Errorf("ParseCgroupPath(%q)\n = (%q, %q)\nwant (%q, %q)", tc.path, cid, pod, tc.wantCID, tc.wantPod)
			}
		})
	}
}
