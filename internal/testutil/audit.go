package testutil

import (
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// ExecRequest describes one `kubectl exec` as kube-apiserver audits it.
type ExecRequest struct {
	AuditID   string
	User      string
	Groups    []string
	As        string // impersonated user, if any
	Namespace string
	Pod       string
	Container string
	Command   []string
	Env       []string // KEP-6035 env= parameters
	TTY       bool
	// Code is the response code: 0 means 101 (an upgraded stream); 403
	// makes a denied request with decision forbid.
	Code     int32
	Received time.Time
	// Duration is how long the session lasted (ResponseComplete - received).
	Duration time.Duration
	// Annotations are added to every stage's annotations (an admission
	// webhook's audit annotations, as "<webhook name>/<key>").
	Annotations map[string]string
	// Ephemeral makes the request kubectl debug's: a patch of the pod's
	// ephemeralcontainers adding Container (image busybox, Command), logged
	// at level Request with that body.
	Ephemeral bool
}

// Events returns the request's audit events in stage order, built from the
// real audit.k8s.io/v1 types so they marshal as kube-apiserver writes them:
// WebSocket-style verb "get", RequestReceived, then ResponseStarted (101)
// and ResponseComplete, or a lone ResponseComplete for a denied request.
func (r ExecRequest) Events() []auditv1.Event {
	q := url.Values{}
	for _, c := range r.Command {
		q.Add("command", c)
	}
	for _, e := range r.Env {
		q.Add("env", e)
	}
	if r.Container != "" {
		q.Set("container", r.Container)
	}
	q.Set("stdin", "true")
	q.Set("stdout", "true")
	if r.TTY {
		q.Set("tty", "true")
	}
	code := r.Code
	if code == 0 {
		code = 101
	}
	decision := "allow"
	if code == 403 {
		decision = "forbid"
	}
	base := auditv1.Event{
		TypeMeta:   metav1.TypeMeta{Kind: "Event", APIVersion: "audit.k8s.io/v1"},
		Level:      auditv1.LevelMetadata,
		AuditID:    types.UID(r.AuditID),
		RequestURI: fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/exec?%s", r.Namespace, r.Pod, q.Encode()),
		Verb:       "get",
		User:       authnv1.UserInfo{Username: r.User, Groups: append(r.Groups, "system:authenticated")},
		SourceIPs:  []string{"10.0.0.7"},
		UserAgent:  "kubectl/v1.36.0 (linux/amd64) kubernetes/abcdef0",
		ObjectRef: &auditv1.ObjectReference{Resource: "pods", Namespace: r.Namespace, Name: r.Pod,
			APIVersion: "v1", Subresource: "exec"},
		RequestReceivedTimestamp: metav1.NewMicroTime(r.Received),
		Annotations:              map[string]string{"authorization.k8s.io/decision": decision},
	}
	for k, v := range r.Annotations {
		base.Annotations[k] = v
	}
	if r.As != "" {
		base.ImpersonatedUser = &authnv1.UserInfo{Username: r.As}
	}
	if r.Ephemeral {
		return r.ephemeralEvents(base)
	}
	stage := func(s auditv1.Stage, at time.Time, status bool) auditv1.Event {
		e := base
		e.Stage, e.StageTimestamp = s, metav1.NewMicroTime(at)
		if status {
			e.ResponseStatus = &metav1.Status{Code: code}
		}
		return e
	}
	end := r.Received.Add(r.Duration)
	if code != 101 {
		e := stage(auditv1.StageResponseComplete, end, true)
		e.ResponseStatus.Status = metav1.StatusFailure
		e.ResponseStatus.Reason = metav1.StatusReasonForbidden
		return []auditv1.Event{stage(auditv1.StageRequestReceived, r.Received, false), e}
	}
	return []auditv1.Event{
		stage(auditv1.StageRequestReceived, r.Received, false),
		stage(auditv1.StageResponseStarted, r.Received.Add(time.Millisecond), true),
		stage(auditv1.StageResponseComplete, end, true),
	}
}

// LogLines returns the events as audit log lines (JSON, newline-ended).
func (r ExecRequest) LogLines() []byte {
	var out []byte
	for _, e := range r.Events() {
		b, err := json.Marshal(e)
		if err != nil {
			panic(err) // the types marshal; a failure is a bug here
		}
		out = append(append(out, b...), '\n')
	}
	return out
}

// EventList returns the events as one webhook POST body.
func (r ExecRequest) EventList() []byte { return EventListOf(r) }

// EventListOf returns every request's events as one webhook POST body, as
// kube-apiserver's batching webhook backend sends them.
func EventListOf(reqs ...ExecRequest) []byte {
	var items []auditv1.Event
	for _, r := range reqs {
		items = append(items, r.Events()...)
	}
	b, err := json.Marshal(auditv1.EventList{
		TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "audit.k8s.io/v1"},
		Items:    items,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// ephemeralEvents are kubectl debug's patch of pods/ephemeralcontainers:
// RequestReceived and a 200 ResponseComplete, with the patch as the body.
func (r ExecRequest) ephemeralEvents(base auditv1.Event) []auditv1.Event {
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []map[string]any{{
		"name": r.Container, "image": "busybox", "command": r.Command, "targetContainerName": "app"}}}})
	if err != nil {
		panic(err) // maps of strings always marshal
	}
	base.Level, base.Verb = auditv1.LevelRequest, "patch"
	base.RequestURI = fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/ephemeralcontainers", r.Namespace, r.Pod)
	base.ObjectRef.Subresource = "ephemeralcontainers"
	base.RequestObject = &runtime.Unknown{Raw: body, ContentType: "application/json"}
	rr := base
	rr.Stage, rr.StageTimestamp = auditv1.StageRequestReceived, metav1.NewMicroTime(r.Received)
	done := base
	done.Stage, done.StageTimestamp = auditv1.StageResponseComplete, metav1.NewMicroTime(r.Received.Add(r.Duration))
	done.ResponseStatus = &metav1.Status{Code: 200}
	return []auditv1.Event{rr, done}
}
