package auditlog

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"
	logbackend "k8s.io/apiserver/plugin/pkg/audit/log"
	"k8s.io/apiserver/plugin/pkg/audit/webhook"

	"github.com/rs/zerolog"
)

// apiserverExec builds an exec event the way kube-apiserver's audit filter
// fills it in.
func apiserverExec(i int, stage auditinternal.Stage) *auditinternal.Event {
	at := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)
	ev := &auditinternal.Event{
		Level:                    auditinternal.LevelMetadata,
		AuditID:                  types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
		Stage:                    stage,
		RequestURI:               fmt.Sprintf("/api/v1/namespaces/ns/pods/p-%d/exec?command=sh&command=-c&command=echo+%%22a%%26b%%22&container=app&stdin=true&tty=true", i),
		Verb:                     "get",
		User:                     authnv1.UserInfo{Username: "alice", UID: "u-1", Groups: []string{"system:authenticated"}, Extra: map[string]authnv1.ExtraValue{"scope": {"x"}}},
		ImpersonatedUser:         &authnv1.UserInfo{Username: "bob"},
		SourceIPs:                []string{"10.0.0.1"},
		UserAgent:                "kubectl/v1.35.0 <x>",
		ObjectRef:                &auditinternal.ObjectReference{Resource: "pods", Namespace: "ns", Name: fmt.Sprintf("p-%d", i), APIVersion: "v1", Subresource: "exec"},
		ResponseStatus:           &metav1.Status{Code: 101},
		RequestReceivedTimestamp: metav1.NewMicroTime(at),
		StageTimestamp:           metav1.NewMicroTime(at.Add(time.Second)),
		Annotations:              map[string]string{AnnotationDecision: "allow"},
	}
	return ev
}

// TestWebhookWithApiserverClient sends through kube-apiserver's own webhook
// backend wrapped in its buffered backend (batches of up to 400, sent
// asynchronously, retried with backoff) while the sink refuses some batches.
func TestWebhookWithApiserverClient(t *testing.T) {
	s := &mergeSink{m: NewMerger(MergerConfig{})}
	var calls atomic.Int64
	sink := func(ctx context.Context, evs []Event) error {
		if calls.Add(1)%3 == 1 {
			return errors.New("queue full") // 503: the apiserver must retry these
		}
		return s.sink(ctx, evs)
	}
	// client-go sends a bearer token only over TLS.
	srv := httptest.NewTLSServer(NewWebhookHandler(WebhookConfig{BearerToken: "s3cret"}, sink, zerolog.Nop(), nil))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: correlator
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: apiserver
  user:
    token: s3cret
contexts:
- name: default
  context: {cluster: correlator, user: apiserver}
current-context: default
`, srv.URL, base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))), 0o600); err != nil {
		t.Fatal(err)
	}
	wb, err := webhook.NewBackend(kubeconfig, auditv1.SchemeGroupVersion, wait.Backoff{Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := buffered.NewBackend(wb, buffered.BatchConfig{BufferSize: 10000, MaxBatchSize: 400, MaxBatchWait: 20 * time.Millisecond, AsyncDelegate: true})
	stop := make(chan struct{})
	if err := b.Run(stop); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		b.ProcessEvents(apiserverExec(i, auditinternal.StageResponseStarted))
	}
	for i := range n {
		b.ProcessEvents(apiserverExec(i, auditinternal.StageResponseComplete))
	}
	close(stop)
	b.Shutdown() // flushes and waits for in-flight batches

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m.Stats()
	if st.Records != n || st.Conflicts != 0 {
		t.Fatalf("merger stats %+v, want %d records", st, n)
	}
	r := s.m.Lookup(fmt.Sprintf("00000000-0000-4000-8000-%012d", 7))[0]
	if !r.Complete() || r.Pod != "p-7" || r.Command[2] != `echo "a&b"` || r.Effective().Username != "bob" ||
		r.User.Extra["scope"][0] != "x" || r.Decision != "allow" || r.UserAgent != "kubectl/v1.35.0 <x>" ||
		r.EndTimestamp.Sub(r.RequestReceivedTimestamp) != time.Second {
		t.Fatalf("record = %+v", r)
	}
	if calls.Load() < 3 {
		t.Fatalf("only %d deliveries", calls.Load())
	}
}

// TestTailWithApiserverLogBackend tails what kube-apiserver's own log backend
// writes through lumberjack, rotating every megabyte.
func TestTailWithApiserverLogBackend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	lj := &lumberjack.Logger{Filename: path, MaxSize: 1}
	defer lj.Close()
	b := logbackend.NewBackend(lj, logbackend.FormatJson, auditv1.SchemeGroupVersion)
	c := newCollector()
	stop := startTailer(t, TailConfig{Paths: []string{path}, CheckpointDir: filepath.Join(dir, "cp")}, c)
	const n = 4000
	ids := make([]string, n)
	for i := range n {
		ev := apiserverExec(i, auditinternal.StageResponseStarted)
		ids[i] = string(ev.AuditID)
		if !b.ProcessEvents(ev) {
			t.Fatal("log backend refused an event")
		}
		if i == 0 {
			c.waitFor(t, 1) // the tailer has the live file open before it rotates
		}
	}
	c.waitFor(t, n)
	stop()
	c.exactlyOnce(t, ids)
	if len(rotatedSiblings(path)) < 2 {
		t.Fatalf("lumberjack did not rotate")
	}
}
