// Package clustertest stands in for kube-apiserver in front of a fleet of
// correlator node agents, for tests and benchmarks of the fan-out at
// scale: over TLS and HTTP/2 on loopback, as kube-apiserver serves, it
// lists one agent pod a node and proxies to each agent's real API
// handler as the pod proxy does (without the caller's Authorization).
// Some agents accept the request and never answer, until it is
// cancelled.
package clustertest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// Token is the bearer token the stand-in accepts from the caller, and
// the agents in the proxy header (api.ProxyAuthHeader).
const Token = "fleet-token"

// Namespace is where the agent pods run, with cluster's default labels
// and API port name.
const Namespace = "correlator"

// T0 is the newest session's time.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Options size a fleet.
type Options struct {
	// Nodes is how many nodes run an agent: node-0000, node-0001, ...
	Nodes int
	// Hanging is how many of those agents never answer, spread evenly
	// over the nodes.
	Hanging int
	// Sessions is how many sessions each answering agent holds (0: 1).
	Sessions int
	// Reader, when set, is what node's agent serves instead of the
	// generated sessions (a real store of that node's data).
	Reader func(node string) api.Reader
}

// Fleet is a running stand-in.
type Fleet struct {
	// URL is kube-apiserver's; CA the PEM of its certificate.
	URL string
	CA  []byte
	// Hanging and Answering are the nodes whose agents never answer and
	// those that answer, sorted.
	Hanging, Answering []string

	srv       *httptest.Server
	agents    map[string]http.Handler // pod -> its API
	hangs     map[string]bool         // pods that never answer
	pods      map[string]corev1.Pod   // node -> its agent pod
	podList   []byte
	nodeList  []byte
	held      atomic.Int64
	stop      chan struct{}
	stopOnce  sync.Once
	nSessions int
}

// Start runs a fleet until tb ends.
func Start(tb testing.TB, o Options) *Fleet {
	tb.Helper()
	f := &Fleet{agents: map[string]http.Handler{}, hangs: map[string]bool{}, pods: map[string]corev1.Pod{}, stop: make(chan struct{}),
		nSessions: max(o.Sessions, 1)}
	pl := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	nl := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}}
	every := 0
	if o.Hanging > 0 {
		every = o.Nodes / o.Hanging
	}
	for i := range o.Nodes {
		node := fmt.Sprintf("node-%04d", i)
		p := agentPod(node)
		pl.Items = append(pl.Items, p)
		f.pods[node] = p
		nl.Items = append(nl.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		if every > 0 && i%every == every/2 && len(f.Hanging) < o.Hanging {
			f.Hanging = append(f.Hanging, node)
			f.hangs[p.Name] = true
			continue
		}
		f.Answering = append(f.Answering, node)
		var r api.Reader = f.agentStore(node, i)
		if o.Reader != nil {
			r = o.Reader(node)
		}
		f.agents[p.Name] = api.NewHandler(r, api.Config{Auth: proxiedAuth{}}, zerolog.Nop())
	}
	var err error
	if f.podList, err = json.Marshal(&pl); err != nil {
		tb.Fatal(err)
	}
	if f.nodeList, err = json.Marshal(&nl); err != nil {
		tb.Fatal(err)
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	tb.Cleanup(f.srv.Close)
	tb.Cleanup(f.Stop) // before Close: Close waits for the hanging agents
	f.URL = f.srv.URL
	f.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	return f
}

// Stop ends the requests the hanging agents hold, as a closing
// kube-apiserver would.
func (f *Fleet) Stop() { f.stopOnce.Do(func() { close(f.stop) }) }

// Held is how many requests the hanging agents hold now.
func (f *Fleet) Held() int { return int(f.held.Load()) }

// Rest is a client config for the fleet's kube-apiserver.
func (f *Fleet) Rest() *rest.Config {
	return &rest.Config{Host: f.URL, BearerToken: Token, TLSClientConfig: rest.TLSClientConfig{CAData: f.CA}}
}

// Kubeconfig writes a kubeconfig for the fleet under tb's temporary
// directory and returns its path.
func (f *Fleet) Kubeconfig(tb testing.TB) string {
	tb.Helper()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fleet
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: fleet
  user:
    token: %s
contexts:
- name: fleet
  context: {cluster: fleet, user: fleet, namespace: default}
current-context: fleet
`, f.URL, base64.StdEncoding.EncodeToString(f.CA), Token)
	path := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// SessionIDs are the audit IDs the agents on nodes hold.
func (f *Fleet) SessionIDs(nodes []string) []string {
	var out []string
	for _, n := range nodes {
		for j := range f.nSessions {
			out = append(out, SessionID(n, j))
		}
	}
	return out
}

// SessionID is the audit ID of node's j-th session.
func SessionID(node string, j int) string { return node + "-s" + strconv.Itoa(j) }

func agentPod(node string) corev1.Pod {
	return corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "correlator-" + node, Namespace: Namespace, Labels: map[string]string{
			"app.kubernetes.io/name": "correlator", "app.kubernetes.io/component": "node-agent"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent",
			Ports: []corev1.ContainerPort{{Name: "api", ContainerPort: 8080}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// agentStore holds node i's sessions, one a minute, node i's newest i
// seconds before T0.
func (f *Fleet) agentStore(node string, i int) *agentStore {
	s := &agentStore{}
	for j := range f.nSessions {
		s.sessions = append(s.sessions, join.Session{ExecRecord: auditlog.ExecRecord{AuditID: SessionID(node, j),
			Namespace: "prod", Pod: "web-" + node, Container: "app", User: auditlog.UserInfo{Username: "alice"},
			Command:                  []string{"sh"},
			RequestReceivedTimestamp: T0.Add(-time.Duration(i)*time.Second - time.Duration(j)*time.Minute)}})
	}
	return s
}

func (f *Fleet) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+Token {
		status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/api/v1/nodes":
		writeJSON(w, f.nodeList)
	case r.URL.Path == "/api/v1/namespaces/"+Namespace+"/pods":
		f.listPods(w, r)
	case len(parts) >= 7 && parts[2] == "namespaces" && parts[3] == Namespace && parts[4] == "pods" && parts[6] == "proxy":
		f.proxy(w, r, parts[5], "/"+strings.Join(parts[7:], "/"))
	default:
		status(w, http.StatusNotFound, "NotFound")
	}
}

// listPods lists every agent pod, or the one on the node a
// spec.nodeName field selector names.
func (f *Fleet) listPods(w http.ResponseWriter, r *http.Request) {
	fs, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest")
		return
	}
	node, ok := fs.RequiresExactMatch("spec.nodeName")
	if !ok {
		writeJSON(w, f.podList)
		return
	}
	l := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	if p, ok := f.pods[node]; ok {
		l.Items = append(l.Items, p)
	}
	b, _ := json.Marshal(&l)
	writeJSON(w, b)
}

// proxy hands the request to the agent of the pod named
// [scheme:]pod:port, without Authorization; a hanging agent holds it
// until it is cancelled.
func (f *Fleet) proxy(w http.ResponseWriter, r *http.Request, name, path string) {
	fs := strings.Split(name, ":")
	if len(fs) < 2 {
		status(w, http.StatusBadRequest, "BadRequest")
		return
	}
	pod := fs[len(fs)-2]
	if f.hangs[pod] {
		f.held.Add(1)
		defer f.held.Add(-1)
		select {
		case <-r.Context().Done():
		case <-f.stop:
		}
		return
	}
	h, ok := f.agents[pod]
	if !ok {
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable") // error trying to reach service
		return
	}
	r2 := r.Clone(r.Context())
	r2.Header.Del("Authorization")
	r2.URL.Path = path
	r2.RequestURI = ""
	h.ServeHTTP(w, r2)
}

func status(w http.ResponseWriter, code int, reason string) {
	b, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: metav1.StatusReason(reason), Code: int32(code), Message: reason})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// proxiedAuth accepts Token, only in the proxy header.
type proxiedAuth struct{}

func (proxiedAuth) Authenticate(r *http.Request) (string, error) {
	if r.Header.Get(api.ProxyAuthHeader) == "Bearer "+Token {
		return "responder", nil
	}
	return "", api.ErrUnauthenticated
}

// agentStore is one agent's sessions, newest first, in memory.
type agentStore struct{ sessions []join.Session }

func (s *agentStore) ListSessions(_ context.Context, f store.SessionFilter) ([]join.Session, string, error) {
	var out []join.Session
	for _, x := range s.sessions {
		if (f.Namespace == "" || x.Namespace == f.Namespace) && (f.Pod == "" || x.Pod == f.Pod) {
			out = append(out, x)
		}
	}
	off, _ := strconv.Atoi(f.Cursor)
	off = min(off, len(out))
	end := len(out)
	if f.Limit > 0 {
		end = min(off+f.Limit, end)
	}
	next := ""
	if end < len(out) {
		next = strconv.Itoa(end)
	}
	return out[off:end], next, nil
}

func (s *agentStore) GetSession(_ context.Context, id string) (store.SessionDetail, error) {
	for _, x := range s.sessions {
		if x.AuditID == id {
			return store.SessionDetail{Session: x, Processes: []join.Process{}}, nil
		}
	}
	return store.SessionDetail{}, store.ErrNotFound
}

func (s *agentStore) ListProcesses(context.Context, store.ProcessFilter) ([]join.Process, string, error) {
	return []join.Process{}, "", nil
}

func (s *agentStore) ListAlerts(context.Context, store.AlertFilter) ([]store.Alert, string, error) {
	return []store.Alert{}, "", nil
}
