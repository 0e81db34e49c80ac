package deploy

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/plugin/pkg/audit/webhook"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
)

// TestAuditPolicy evaluates the policy with kube-apiserver's own policy
// code: every way into a pod is logged with its request, the noise is not.
func TestAuditPolicy(t *testing.T) {
	raw := readFile(t, "audit/audit-policy.yaml")
	var strict auditv1.Policy
	if err := yaml.UnmarshalStrict(raw, &strict); err != nil {
		t.Fatalf("decoding audit policy strictly: %v", err)
	}
	p, err := policy.LoadPolicyFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	ev := policy.NewPolicyRuleEvaluator(p)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	res := func(verb, resource, sub string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: alice, Verb: verb, Namespace: "prod", Resource: resource,
			Subresource: sub, Name: "web", ResourceRequest: true}
	}
	for _, c := range []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  auditinternal.Level
	}{
		// kubectl >= 1.30 execs over WebSocket (verb get), older over SPDY (create).
		{"exec websocket", res("get", "pods", "exec"), auditinternal.LevelRequest},
		{"exec spdy", res("create", "pods", "exec"), auditinternal.LevelRequest},
		{"attach", res("get", "pods", "attach"), auditinternal.LevelRequest},
		{"port-forward", res("create", "pods", "portforward"), auditinternal.LevelRequest},
		{"kubectl debug", res("patch", "pods", "ephemeralcontainers"), auditinternal.LevelRequest},
		{"node proxy", authorizer.AttributesRecord{User: alice, Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "n1", ResourceRequest: true}, auditinternal.LevelMetadata},
		{"secret read", res("get", "secrets", ""), auditinternal.LevelNone},
		{"secret write", res("update", "secrets", ""), auditinternal.LevelMetadata},
		{"pod list", res("list", "pods", ""), auditinternal.LevelNone},
		{"pod create", res("create", "pods", ""), auditinternal.LevelMetadata},
		{"token review", authorizer.AttributesRecord{User: alice, Verb: "create", APIGroup: "authentication.k8s.io", Resource: "tokenreviews", ResourceRequest: true}, auditinternal.LevelMetadata},
		{"events", res("create", "events", ""), auditinternal.LevelNone},
		{"healthz", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/healthz/etcd"}, auditinternal.LevelNone},
	} {
		cfg := ev.EvaluatePolicyRule(c.attrs)
		if cfg.Level != c.want {
			t.Errorf("%s: level %s, want %s", c.name, cfg.Level, c.want)
		}
		for _, s := range cfg.OmitStages {
			if s == auditinternal.StageResponseStarted || s == auditinternal.StageResponseComplete {
				t.Errorf("%s: stage %s omitted; correlator needs a session's start and end", c.name, s)
			}
		}
	}
}

// TestWebhookKubeconfig loads the shipped kubeconfig into kube-apiserver's
// own webhook backend and sends an exec event through it to correlator's
// webhook handler, on the path the agent serves, with the token it checks.
func TestWebhookKubeconfig(t *testing.T) {
	const token = "t0ken-from-the-secret"
	var mu sync.Mutex
	var got []auditlog.Event
	sink := func(_ context.Context, evs []auditlog.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, evs...)
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+api.WebhookPath, auditlog.NewWebhookHandler(auditlog.WebhookConfig{BearerToken: token}, sink, zerolog.Nop(), nil))
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()

	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	kc := strings.NewReplacer(
		"https://10.96.100.100:8080", srv.URL,
		"REPLACE_WITH_CA_DATA", ca,
		"REPLACE_WITH_TOKEN", token,
	).Replace(string(readFile(t, "audit/webhook-kubeconfig.yaml")))
	var cfg clientcmdv1.Config
	if err := yaml.UnmarshalStrict([]byte(kc), &cfg); err != nil {
		t.Fatalf("decoding kubeconfig strictly: %v", err)
	}
	path := filepath.Join(t.TempDir(), "webhook-kubeconfig.yaml")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := webhook.NewBackend(path, auditv1.SchemeGroupVersion, wait.Backoff{Duration: 5 * time.Millisecond, Factor: 1.5, Steps: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.ProcessEvents(&auditinternal.Event{
		Level: auditinternal.LevelRequest, AuditID: "0b9c2e1a-5f7e-4a53-9c4e-2f1d0c6b8a11",
		Stage: auditinternal.StageResponseStarted, Verb: "get",
		RequestURI:     "/api/v1/namespaces/prod/pods/web/exec?command=sh&container=app&stdin=true&tty=true",
		User:           authnv1.UserInfo{Username: "alice"},
		ObjectRef:      &auditinternal.ObjectReference{Resource: "pods", Namespace: "prod", Name: "web", Subresource: "exec", APIVersion: "v1"},
		ResponseStatus: &metav1.Status{Code: 101}, RequestReceivedTimestamp: metav1.NewMicroTime(at),
		StageTimestamp: metav1.NewMicroTime(at),
	})
	b.Shutdown()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].AuditID != "0b9c2e1a-5f7e-4a53-9c4e-2f1d0c6b8a11" || got[0].User.Username != "alice" {
		t.Fatalf("handler received %+v, want alice's exec", got)
	}
}

// TestKindConfig checks that the kind cluster config points the apiserver
// at the shipped files through its mounts, with KEP-6035's gates on.
func TestKindConfig(t *testing.T) {
	var kind struct {
		FeatureGates map[string]bool `json:"featureGates"`
		Nodes        []struct {
			ExtraMounts []struct {
				ContainerPath string `json:"containerPath"`
			} `json:"extraMounts"`
			KubeadmConfigPatches []string `json:"kubeadmConfigPatches"`
		} `json:"nodes"`
	}
	if err := yaml.Unmarshal(readFile(t, "audit/kind-config.yaml"), &kind); err != nil {
		t.Fatal(err)
	}
	if !kind.FeatureGates["ExecEnvVar"] || !kind.FeatureGates["ExecRequestID"] {
		t.Errorf("feature gates %v, want ExecEnvVar and ExecRequestID", kind.FeatureGates)
	}
	if len(kind.Nodes) != 1 || len(kind.Nodes[0].ExtraMounts) != 1 || len(kind.Nodes[0].KubeadmConfigPatches) != 2 {
		t.Fatalf("want one node with one mount and two kubeadm patches: %+v", kind.Nodes)
	}
	dir := kind.Nodes[0].ExtraMounts[0].ContainerPath
	for _, patch := range kind.Nodes[0].KubeadmConfigPatches {
		var p map[string]any
		if err := yaml.UnmarshalStrict([]byte(patch), &p); err != nil {
			t.Fatalf("kubeadm patch: %v", err)
		}
		for _, f := range []string{"audit-policy.yaml", "webhook-kubeconfig.yaml"} {
			if !strings.Contains(patch, dir+"/"+f) {
				t.Errorf("%v patch does not pass %s/%s", p["apiVersion"], dir, f)
			}
			if _, err := os.Stat(filepath.Join("audit", f)); err != nil {
				t.Error(err)
			}
		}
	}
}
