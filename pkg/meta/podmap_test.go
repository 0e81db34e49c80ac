package meta

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

const (
	cidA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	cidB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	uidA = "11111111-2222-3333-4444-555555555555"
	uidB = "66666666-7777-8888-9999-000000000000"
)

var (
	infoA = Info{ContainerID: cidA, PodUID: uidA, Namespace: "default", Pod: "web-0", Container: "nginx"}
	infoB = Info{ContainerID: cidB, PodUID: uidB, Namespace: "kube-system", Pod: "dns-1", Container: "coredns"}
)

func TestParsePodMap(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Info
		wantErr string // substring; empty means no error
	}{
		{
			name: "json",
			in: `[{"containerID":"` + cidA + `","podUID":"` + uidA + `","namespace":"default","pod":"web-0","container":"nginx"},
			      {"containerID":"` + cidB + `","podUID":"` + uidB + `","namespace":"kube-system","pod":"dns-1","container":"coredns"}]`,
			want: []Info{infoA, infoB},
		},
		{
			name: "yaml",
			in: "# two containers\n- containerID: " + cidA + "\n  podUID: " + uidA + "\n  namespace: default\n  pod: web-0\n  container: nginx\n" +
				"- containerID: " + cidB + "\n  podUID: " + uidB + "\n  namespace: kube-system\n  pod: dns-1\n  container: coredns\n",
			want: []Info{infoA, infoB},
		},
		{
			name:    "yaml flow list that is not JSON",
			in:      "[{containerID: " + cidA + ", namespace: default, pod: web-0}]",
			wantErr: "JSON", // '[' selects JSON; unquoted keys are a JSON syntax error
		},
		{
			name: "json with BOM and surrounding blanks",
			in:   "\xef\xbb\xbf\n  [{\"containerID\":\"" + cidA + "\"}]  \n",
			want: []Info{{ContainerID: cidA}},
		},
		{name: "empty", in: "", want: []Info{}},
		{name: "blank and comments", in: "\n  # nothing yet\n", want: []Info{}},
		{name: "empty json list", in: "[]", want: []Info{}},
		{name: "yaml null", in: "null", want: []Info{}},
		{
			name: "ids normalized",
			in:   "- containerID: ' " + strings.ToUpper(cidA) + " '\n  podUID: " + strings.ToUpper(uidA) + "\n",
			want: []Info{{ContainerID: cidA, PodUID: uidA}},
		},
		{
			name: "pod-wide entry",
			in:   "- podUID: " + uidA + "\n  namespace: default\n  pod: web-0\n",
			want: []Info{{PodUID: uidA, Namespace: "default", Pod: "web-0"}},
		},
		{
			name: "labels json",
			in:   `[{"containerID":"` + cidA + `","namespace":"default","pod":"web-0","labels":{"app":"web","app.kubernetes.io/part-of":"shop"}}]`,
			want: []Info{{ContainerID: cidA, Namespace: "default", Pod: "web-0",
				Labels: map[string]string{"app": "web", "app.kubernetes.io/part-of": "shop"}}},
		},
		{
			name: "labels yaml, numbers and booleans as text, kept verbatim",
			in:   "- podUID: " + uidA + "\n  labels:\n    app: web\n    version: 2\n    canary: true\n    ' spaced ': ' x '\n",
			want: []Info{{PodUID: uidA, Labels: map[string]string{"app": "web", "version": "2", "canary": "true", " spaced ": " x "}}},
		},
		{
			name: "empty labels are none",
			in:   "- containerID: " + cidA + "\n  labels: {}\n- containerID: " + cidB + "\n  labels:\n",
			want: []Info{{ContainerID: cidA}, {ContainerID: cidB}},
		},
		{
			name:    "labels not a map",
			in:      "- containerID: " + cidA + "\n  labels: [app, web]\n",
			wantErr: "parsing pod map as YAML",
		},
		{
			name:    "label value not a string",
			in:      `[{"containerID":"` + cidA + `","labels":{"app":{"name":"web"}}}]`,
			wantErr: "line 1 column",
		},
		{
			name:    "json syntax error has a position",
			in:      "[\n  {\"containerID\": \"" + cidA + "\",}\n]",
			wantErr: "line 2 column",
		},
		{
			name:    "json truncated has a position",
			in:      "[{\"containerID\": \"" + cidA + "\"",
			wantErr: "line 1 column",
		},
		{
			name:    "json wrong type has a position",
			in:      "[\n{\"containerID\": 42}]",
			wantErr: "line 2 column",
		},
		{
			name:    "json trailing data",
			in:      "[] []",
			wantErr: "data after the list",
		},
		{
			name:    "yaml syntax error has a line",
			in:      "- containerID: " + cidA + "\n  pod: [unclosed\n",
			wantErr: "line",
		},
		{
			name:    "yaml object, not a list",
			in:      "containerID: " + cidA + "\n",
			wantErr: "parsing pod map as YAML",
		},
		{
			name:    "unknown field",
			in:      `[{"containerID":"` + cidA + `","podname":"web-0"}]`,
			wantErr: `unknown field "podname"`,
		},
		{
			name:    "unknown field yaml",
			in:      "- containerID: " + cidA + "\n  image: nginx\n",
			wantErr: `unknown field "image"`,
		},
		{
			name:    "duplicate containerID",
			in:      "- containerID: " + cidA + "\n  pod: a\n- containerID: " + strings.ToUpper(cidA) + "\n  pod: b\n",
			wantErr: "entry 1: duplicate containerID",
		},
		{
			name:    "duplicate pod-wide podUID",
			in:      "- podUID: " + uidA + "\n- podUID: " + uidA + "\n",
			wantErr: "entry 1: duplicate pod-wide podUID",
		},
		{
			name:    "entry without ids",
			in:      `[{"namespace":"default","pod":"web-0"}]`,
			wantErr: "entry 0: needs a containerID or a podUID",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePodMap([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parsePodMap() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parsePodMap() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("parsePodMap() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStaticResolve(t *testing.T) {
	pod := Info{PodUID: uidB, Namespace: "kube-system", Pod: "dns-1", Labels: map[string]string{"k8s-app": "kube-dns"}}
	noUID := Info{ContainerID: cidB, Namespace: "default", Pod: "runc-demo", Container: "demo"}
	s, err := NewStatic([]Info{infoA, pod})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewStatic([]Info{noUID})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		s         *Static
		cid, uid  string
		want      Info
		wantFound bool
	}{
		{"by container ID", s, cidA, "", infoA, true},
		{"by container ID, upper case", s, strings.ToUpper(cidA), uidA, infoA, true},
		{"by pod UID, with the pod's labels", s, cidB, uidB,
			Info{ContainerID: cidB, PodUID: uidB, Namespace: "kube-system", Pod: "dns-1", Labels: map[string]string{"k8s-app": "kube-dns"}}, true},
		{"unknown", s, cidB, "", Info{}, false},
		{"nothing", s, "", "", Info{}, false},
		{"entry without pod UID takes the caller's", s2, cidB, uidB, Info{ContainerID: cidB, PodUID: uidB, Namespace: "default", Pod: "runc-demo", Container: "demo"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := tt.s.Resolve(context.Background(), tt.cid, tt.uid)
			if err != nil || found != tt.wantFound || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Resolve() = %+v, %v, %v; want %+v, %v, nil", got, found, err, tt.want, tt.wantFound)
			}
		})
	}
}

func TestPodMapFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods.yaml")
	write := func(content string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	write("- containerID: "+cidA+"\n  namespace: default\n  pod: web-0\n", t0)
	p, err := loadPodMapFile(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got, found, _ := p.Resolve(ctx, cidA, ""); !found || got.Pod != "web-0" {
		t.Fatalf("before reload: %+v, %v", got, found)
	}

	write("- containerID: "+cidA+"\n  namespace: default\n  pod: web-1\n", t0.Add(time.Minute))
	if got, found, _ := p.Resolve(ctx, cidA, ""); !found || got.Pod != "web-1" {
		t.Fatalf("after reload: %+v, %v; want pod web-1", got, found)
	}

	// A broken file keeps the previous map.
	write("- containerID: [\n", t0.Add(2*time.Minute))
	if got, found, _ := p.Resolve(ctx, cidA, ""); !found || got.Pod != "web-1" {
		t.Fatalf("after a broken reload: %+v, %v; want the previous map", got, found)
	}
}

func TestLoadPodMapFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadPodMapFile(filepath.Join(dir, "missing.yaml"), zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "reading pod map") {
		t.Fatalf("missing file: error = %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("[{]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadPodMapFile(bad, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "loading pod map "+bad) {
		t.Fatalf("bad file: error = %v", err)
	}
}
