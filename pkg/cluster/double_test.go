package cluster

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"context"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

const (
	responderToken = "responder-token"
	mintedToken    = "minted-token"
)

// apiserverDouble is a test double of kube-apiserver: the pod and node
// lists, pod get, TokenRequest, and the pod proxy, which drops
// Authorization as the real one does and hands the request to the agent
// of the named pod (the real API handler over an in-memory store).
type apiserverDouble struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	pods   []corev1.Pod
	nodes  []string
	agents map[string]http.Handler // agent pod name -> handler
	// nodesForbidden answers 403 to node lists; proxied records the
	// proxy names asked; minted the TokenRequests seen.
	nodesForbidden bool
	proxied        []string
	minted         []authnv1.TokenRequest
}

func newAPIServerDouble(t *testing.T) *apiserverDouble {
	d := &apiserverDouble{t: t, agents: map[string]http.Handler{}}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	return d
}

// addAgent runs an agent pod on node serving st; phase "" is Running.
func (d *apiserverDouble) addAgent(node string, st *nodeStore, phase corev1.PodPhase, scheme corev1.URIScheme) {
	name := "correlator-" + node
	p := corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultAgentNamespace, Labels: map[string]string{
			"app.kubernetes.io/name": "correlator", "app.kubernetes.io/component": "node-agent"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent",
			Ports:          []corev1.ContainerPort{{Name: "api", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Scheme: scheme}}},
		}}},
		Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if phase == "" {
		p.Status.Phase = corev1.PodRunning
	}
	d.pods = append(d.pods, p)
	if st != nil {
		d.agents[name] = api.NewHandler(st, api.Config{Auth: proxiedAuth{}}, zerolog.Nop())
	}
}

// addPod adds a workload pod with labels ("key=value"); node "" is a
// pod not scheduled yet.
func (d *apiserverDouble) addPod(ns, name, node string, lbls ...string) {
	set := map[string]string{}
	for _, l := range lbls {
		k, v, _ := strings.Cut(l, "=")
		set[k] = v
	}
	d.pods = append(d.pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: set},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
}

func (d *apiserverDouble) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+responderToken {
		d.status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/api/v1/nodes":
		if d.nodesForbidden {
			d.status(w, http.StatusForbidden, "Forbidden")
			return
		}
		var l corev1.NodeList
		for _, n := range d.nodes {
			l.Items = append(l.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		writeObj(w, &l)
	case r.URL.Path == "/api/v1/pods": // every namespace
		d.listPods(w, r, "")
	case len(parts) == 5 && parts[4] == "pods": // api/v1/namespaces/NS/pods
		d.listPods(w, r, parts[3])
	case len(parts) == 6 && parts[4] == "pods": // .../pods/NAME
		for _, p := range d.pods {
			if p.Namespace == parts[3] && p.Name == parts[5] {
				writeObj(w, &p)
				return
			}
		}
		d.status(w, http.StatusNotFound, "NotFound")
	case len(parts) == 7 && parts[4] == "serviceaccounts" && parts[6] == "token" && r.Method == http.MethodPost:
		// client-go may send protobuf: decode with the scheme's codecs.
		body, _ := io.ReadAll(r.Body)
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &authnv1.TokenRequest{})
		if err != nil {
			d.status(w, http.StatusBadRequest, "BadRequest")
			return
		}
		tr := *obj.(*authnv1.TokenRequest)
		d.mu.Lock()
		d.minted = append(d.minted, tr)
		d.mu.Unlock()
		tr.Status = authnv1.TokenRequestStatus{Token: mintedToken, ExpirationTimestamp: metav1.NewTime(time.Now().Add(10 * time.Minute))}
		writeObj(w, &tr)
	case len(parts) >= 7 && parts[4] == "pods" && parts[6] == "proxy":
		d.proxy(w, r, parts[3], parts[5], "/"+strings.Join(parts[7:], "/"))
	default:
		d.status(w, http.StatusNotFound, "NotFound")
	}
}

// listPods lists the pods in ns ("": every namespace) that match the
// labelSelector and fieldSelector, as kube-apiserver does.
func (d *apiserverDouble) listPods(w http.ResponseWriter, r *http.Request, ns string) {
	ls, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		d.status(w, http.StatusBadRequest, "BadRequest")
		return
	}
	fs, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
	if err != nil {
		d.status(w, http.StatusBadRequest, "BadRequest")
		return
	}
	l := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	for _, p := range d.pods {
		if (ns == "" || p.Namespace == ns) && ls.Matches(labels.Set(p.Labels)) && fs.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) {
			l.Items = append(l.Items, p)
		}
	}
	writeObj(w, &l)
}

// proxy forwards to the agent pod named [scheme:]pod:port, as
// kube-apiserver does: without the caller's Authorization.
func (d *apiserverDouble) proxy(w http.ResponseWriter, r *http.Request, ns, name, path string) {
	d.mu.Lock()
	d.proxied = append(d.proxied, name)
	d.mu.Unlock()
	f := strings.Split(name, ":")
	pod := f[len(f)-2]
	h, ok := d.agents[pod]
	if !ok || ns != DefaultAgentNamespace {
		d.status(w, http.StatusServiceUnavailable, "ServiceUnavailable") // error trying to reach service
		return
	}
	r2 := r.Clone(r.Context())
	r2.Header.Del("Authorization")
	r2.URL.Path = path
	r2.RequestURI = ""
	h.ServeHTTP(w, r2)
}

func (d *apiserverDouble) status(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: metav1.StatusReason(reason), Code: int32(code), Message: reason})
}

func writeObj(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// proxiedAuth accepts the responder's token, and the minted one, only
// in the proxy header (Authorization never reaches an agent).
type proxiedAuth struct{}

func (proxiedAuth) Authenticate(r *http.Request) (string, error) {
	switch r.Header.Get(api.ProxyAuthHeader) {
	case "Bearer " + responderToken:
		return "responder", nil
	case "Bearer " + mintedToken:
		return "correlator-reader", nil
	}
	return "", api.ErrUnauthenticated
}

// nodeStore is one agent's store, in memory, with pageCap items a page
// so that cursors are followed.
type nodeStore struct {
	sessions []join.Session
	procs    []join.Process
	alerts   []store.Alert
	pageCap  int
}

func page[T any](items []T, cursor string, limit, pageCap int) ([]T, string, error) {
	off, _ := strconv.Atoi(cursor)
	n := min(limit, pageCap)
	if n <= 0 {
		n = pageCap
	}
	if off >= len(items) {
		return []T{}, "", nil
	}
	end := min(off+n, len(items))
	next := ""
	if end < len(items) {
		next = strconv.Itoa(end)
	}
	return items[off:end], next, nil
}

func (s *nodeStore) ListSessions(_ context.Context, f store.SessionFilter) ([]join.Session, string, error) {
	var out []join.Session
	for _, x := range s.sessions {
		if (f.Namespace == "" || x.Namespace == f.Namespace) && (f.Pod == "" || x.Pod == f.Pod) &&
			(f.User == "" || x.User.Username == f.User) && (f.Container == "" || x.Container == f.Container) {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b join.Session) int { return b.RequestReceivedTimestamp.Compare(a.RequestReceivedTimestamp) })
	return page(out, f.Cursor, f.Limit, s.pageCap)
}

func (s *nodeStore) GetSession(_ context.Context, id string) (store.SessionDetail, error) {
	for _, x := range s.sessions {
		if x.AuditID == id {
			d := store.SessionDetail{Session: x, Processes: []join.Process{}}
			for _, p := range s.procs {
				if p.AuditID == id {
					d.Processes = append(d.Processes, p)
				}
			}
			return d, nil
		}
	}
	return store.SessionDetail{}, store.ErrNotFound
}

func (s *nodeStore) ListProcesses(_ context.Context, f store.ProcessFilter) ([]join.Process, string, error) {
	var out []join.Process
	for _, p := range s.procs {
		if f.AuditID == "" || p.AuditID == f.AuditID {
			out = append(out, p)
		}
	}
	return page(out, f.Cursor, f.Limit, s.pageCap)
}

func (s *nodeStore) ListAlerts(_ context.Context, f store.AlertFilter) ([]store.Alert, string, error) {
	return page(s.alerts, f.Cursor, f.Limit, s.pageCap)
}
