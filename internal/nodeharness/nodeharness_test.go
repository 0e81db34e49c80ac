package nodeharness

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestMergeExecEnv(t *testing.T) {
	const id = "KUBERNETES_EXEC_AUDIT_ID=0d5e3c1a-7e8b-4f6a-9a55-2f1f1f1f1f1f"
	for _, tc := range []struct {
		name          string
		baseline, env []string
		want          []string
	}{
		{"appended after the baseline",
			[]string{"PATH=/bin", "HOSTNAME=web"}, []string{id},
			[]string{"PATH=/bin", "HOSTNAME=web", id}},
		{"a duplicate key replaced in place",
			[]string{"PATH=/bin", "KUBERNETES_EXEC_AUDIT_ID=stale", "HOME=/root"}, []string{id},
			[]string{"PATH=/bin", id, "HOME=/root"}},
		{"in the order given",
			[]string{"PATH=/bin"}, []string{"B=2", id, "A=1"},
			[]string{"PATH=/bin", "B=2", id, "A=1"}},
		{"no baseline",
			nil, []string{id},
			[]string{id}},
		{"nothing to add",
			[]string{"PATH=/bin"}, nil,
			[]string{"PATH=/bin"}},
		{"a bare key removes",
			[]string{"PATH=/bin", "SECRET=x", "HOME=/root"}, []string{"SECRET", "NOTSET"},
			[]string{"PATH=/bin", "HOME=/root"}},
		{"the baseline's last occurrence is replaced",
			[]string{"A=1", "A=2"}, []string{"A=3"},
			[]string{"A=1", "A=3"}},
		{"a new key given twice is appended twice, as containerd does",
			[]string{"PATH=/bin"}, []string{"A=1", "A=2"},
			[]string{"PATH=/bin", "A=1", "A=2"}},
		{"an empty value is a value",
			[]string{"A=1"}, []string{"A="},
			[]string{"A="}},
		{"a prefix is not the key",
			[]string{"KUBERNETES_EXEC_AUDIT_ID_OLD=x"}, []string{id},
			[]string{"KUBERNETES_EXEC_AUDIT_ID_OLD=x", id}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			baseline := slices.Clone(tc.baseline)
			got := MergeExecEnv(tc.baseline, tc.env)
			if !slices.Equal(got, tc.want) {
				t.Errorf("MergeExecEnv(%q, %q) = %q, want %q", tc.baseline, tc.env, got, tc.want)
			}
			if !slices.Equal(baseline, tc.baseline) {
				t.Errorf("MergeExecEnv changed its baseline to %q", tc.baseline)
			}
		})
	}
}

func TestExecProcess(t *testing.T) {
	spec := `{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/bin/sleep","100000"],
		"env":["PATH=/bin","A=1"],"cwd":"/","capabilities":{"bounding":["CAP_CHOWN"]},"noNewPrivileges":true,
		"apparmorProfile":"cri-containerd.apparmor.d","oomScoreAdj":1000,"terminal":true},"root":{"path":"rootfs"}}`
	merge := func(b []string) []string { return MergeExecEnv(b, []string{"A=2", "B=3"}) }
	b, merged, err := execProcess([]byte(spec), []string{"/bin/echo", "hi"}, merge)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	wantEnv := []string{"PATH=/bin", "A=2", "B=3"}
	if !slices.Equal(merged, wantEnv) {
		t.Errorf("merged env %q, want %q", merged, wantEnv)
	}
	check := func(key string, want any) {
		t.Helper()
		got, _ := json.Marshal(p[key])
		w, _ := json.Marshal(want)
		if string(got) != string(w) {
			t.Errorf("process %s = %s, want %s", key, got, w)
		}
	}
	check("args", []string{"/bin/echo", "hi"})
	check("env", wantEnv)
	check("terminal", false)
	check("cwd", "/")
	check("noNewPrivileges", true)
	check("apparmorProfile", "cri-containerd.apparmor.d")
	check("oomScoreAdj", 1000)
	check("capabilities", map[string]any{"bounding": []string{"CAP_CHOWN"}})
	check("user", map[string]any{"uid": 0, "gid": 0})

	if _, _, err := execProcess([]byte(`{"root":{}}`), []string{"x"}, merge); err == nil {
		t.Error("execProcess of a spec with no process succeeded")
	}
}

func TestRenderConfig(t *testing.T) {
	l := newLayout("/tmp/nodeharness-x")
	cfg := renderConfig(configParams{layout: l, Snapshotter: "native", SandboxImage: "registry.k8s.io/pause:e2e", StreamPort: 41234})
	for _, want := range []string{
		"version = 2\n",
		`root = "/tmp/nodeharness-x/root"`,
		`state = "/tmp/nodeharness-x/state"`,
		`required_plugins = ["io.containerd.grpc.v1.cri"]`,
		"[grpc]\n  address = \"/tmp/nodeharness-x/containerd.sock\"",
		"[ttrpc]\n  address = \"/tmp/nodeharness-x/containerd.sock.ttrpc\"",
		"[debug]\n  address = \"\"",
		"[metrics]\n  address = \"\"",
		`path = "/tmp/nodeharness-x/opt"`,
		`sandbox_image = "registry.k8s.io/pause:e2e"`,
		`stream_server_address = "127.0.0.1"`,
		`stream_server_port = "41234"`,
		`snapshotter = "native"`,
		`runtime_type = "io.containerd.runc.v2"`,
		"SystemdCgroup = false",
		"restrict_oom_score_adj = true",
		`Root = "/tmp/nodeharness-x/runc"`,
		`bin_dir = "/tmp/nodeharness-x/cni/bin"`,
		`conf_dir = "/tmp/nodeharness-x/cni/net.d"`,
		`runtime_root = "/tmp/nodeharness-x/runc-v1"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	// Nothing may point at the host's containerd paths.
	for _, host := range []string{"/var/lib/containerd", "/run/containerd", "/opt/containerd", "/etc/cni", "/opt/cni"} {
		if strings.Contains(cfg, host) {
			t.Errorf("config names host path %s:\n%s", host, cfg)
		}
	}
}
