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
		// cgroupfs driver
		{"cgroupfs burstable", "/kubepods/burstable/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs besteffort", "/kubepods/besteffort/pod" + uid + "/" + cid, cid, uid},
		{"cgroupfs trailing slash", "/kubepods/burstable/pod" + uid + "/" + cid + "/", cid, uid},
		{"cgroupfs no leading slash", "kubepods/burstable/pod" + uid + "/" + cid, cid, uid},
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
			"systemd kind node",
			"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			cid, uid,
		},
		{
			"CRI-O",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope",
			cid, uid,
		},
		{
			"CRI-O conmon is not a container",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope",
			"", uid,
		},
		{
			"CRI-O container init sub-cgroup",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope/container",
			cid, uid,
		},
		{"pod slice without container", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice", "", uid},

		// other runtimes, no pod
		{"docker cgroupfs", "/docker/" + cid, cid, ""},
		{"docker systemd", "/system.slice/docker-" + cid + ".scope", cid, ""},
		{"podman", "/machine.slice/libpod-" + cid + ".scope", cid, ""},
		{"podman conmon is not a container", "/machine.slice/libpod-conmon-" + cid + ".scope", "", ""},
		{"containerd without kubernetes", "/system.slice/containerd-" + cid + ".scope", cid, ""},

		// host
		{"host user session", "/user.slice/user-1000.slice/session-3.scope", "", ""},
		{"host service", "/system.slice/containerd.service", "", ""},
		{"host kubepods slice", "/kubepods.slice/kubepods-burstable.slice", "", ""},
		{"root", "/", "", ""},
		{"empty", "", "", ""},

		// malformed
		{"63 hex", "/kubepods/burstable/pod" + uid + "/" + cid[:63], "", uid},
		{"65 hex", "/kubepods/burstable/pod" + uid + "/" + cid + "0", "", uid},
		{"non-hex", "/kubepods/burstable/pod" + uid + "/" + cid[:63] + "g", "", uid},
		{"scope with 63 hex", "/system.slice/docker-" + cid[:63] + ".scope", "", ""},
		{"scope without suffix", "/system.slice/docker-" + cid, "", ""},
		{"unknown scope prefix", "/system.slice/runc-" + cid + ".scope", "", ""},
		{"pod uid too short", "/kubepods/burstable/pod" + uid[:35] + "/" + cid, cid, ""},
		{"pod uid non-hex", "/kubepods/burstable/pod" + uid[:35] + "z/" + cid, cid, ""},
		{"pod uid misplaced dash", "/kubepods/burstable/pod" + strings.Replace(uid, "-", "", 1) + "-/" + cid, cid, ""},
		{"pod word inside another word", "/kubepods/burstable/apod" + uid + "/" + cid, cid, ""},
		{"pod segment without uid", "/kubepods/burstable/pod/" + cid, cid, ""},
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
