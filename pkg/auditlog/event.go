// Package auditlog ingests kube-apiserver audit logs (files, webhook bodies and
// vendor envelopes) and turns the exec, attach, port-forward and
// ephemeral-container requests in them into ExecRecords.
//
// Parsing is pure (bytes in, events out); the Tailer and WebhookHandler are
// thin I/O shells around it, and the Merger is an I/O-free state machine that
// the joiner can drive directly.
package auditlog

import "encoding/json"

// Stage names, in the order the apiserver emits them.
const (
	StageRequestReceived  = "RequestReceived"
	StageResponseStarted  = "ResponseStarted"
	StageResponseComplete = "ResponseComplete"
	StagePanic            = "Panic"
)

// Streaming subresources of pods.
const (
	SubresourceExec                = "exec"
	SubresourceAttach              = "attach"
	SubresourcePortForward         = "portforward"
	SubresourceEphemeralContainers = "ephemeralcontainers"
)

// Annotation keys the record lifts out of the annotations map.
const (
	AnnotationDecision = "authorization.k8s.io/decision"
	AnnotationReason   = "authorization.k8s.io/reason"
)

// Event is the subset of audit.k8s.io/v1 Event the correlator needs, decoded
// leniently: unknown keys are ignored and v1beta1 fields are accepted.
type Event struct {
	Kind             string            `json:"kind,omitempty"`
	APIVersion       string            `json:"apiVersion,omitempty"`
	Level            string            `json:"level,omitempty"`
	AuditID          string            `json:"auditID"`
	Stage            string            `json:"stage"`
	RequestURI       string            `json:"requestURI"`
	Verb             string            `json:"verb"`
	User             UserInfo          `json:"user"`
	ImpersonatedUser *UserInfo         `json:"impersonatedUser,omitempty"`
	SourceIPs        []string          `json:"sourceIPs,omitempty"`
	UserAgent        string            `json:"userAgent,omitempty"`
	ObjectRef        *ObjectReference  `json:"objectRef,omitempty"`
	ResponseStatus   *Status           `json:"responseStatus,omitempty"`
	RequestObject    json.RawMessage   `json:"requestObject,omitempty"`
	Annotations      map[string]string `json:"annotations,omitempty"`

	RequestReceivedTimestamp Time `json:"requestReceivedTimestamp"`
	StageTimestamp           Time `json:"stageTimestamp"`

	// v1beta1 leftovers: seconds-precision clocks.
	Timestamp Time          `json:"timestamp,omitzero"`
	Metadata  *eventV1beta1 `json:"metadata,omitempty"`

	legacy bool // read from the legacy text format
	// query is the query string of a source that logs no requestURI but
	// may name the request another way (GKE's resourceName).
	query string
	// idCut: AuditID was over MaxAuditIDBytes and holds its bounded form.
	idCut bool
	// decision is the authorization outcome a vendor shape gives outside
	// the annotations (GKE's authorizationInfo); the annotation wins.
	decision string
	// missingID: the event came without an auditID; AuditID holds the
	// Merger's synthetic key.
	missingID bool
}

type eventV1beta1 struct {
	CreationTimestamp Time `json:"creationTimestamp"`
}

// UserInfo mirrors authentication.k8s.io/v1 UserInfo.
type UserInfo struct {
	Username string              `json:"username,omitempty"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// ObjectReference mirrors audit.k8s.io/v1 ObjectReference.
type ObjectReference struct {
	Resource    string `json:"resource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	UID         string `json:"uid,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Subresource string `json:"subresource,omitempty"`
}

// Status is the part of metav1.Status that matters here.
type Status struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Code    int32  `json:"code,omitempty"`
}

// IsStreaming reports whether ev is a pod exec, attach or port-forward request
// (verb create for SPDY, get for WebSocket) or an ephemeral-container change.
func IsStreaming(ev *Event) bool {
	ref := ev.ObjectRef
	if ref == nil || ref.Resource != "pods" || ref.APIGroup != "" {
		return false
	}
	switch ref.Subresource {
	case SubresourceExec, SubresourceAttach, SubresourcePortForward:
		return ev.Verb == "create" || ev.Verb == "get"
	case SubresourceEphemeralContainers:
		return ev.Verb == "patch" || ev.Verb == "update"
	}
	return false
}

// looksLikeEvent tells an Event from some other JSON object that happens to
// sit in the input: an Event always carries at least one of these.
func looksLikeEvent(ev *Event) bool {
	return ev.AuditID != "" || ev.Verb != "" || ev.RequestURI != "" || ev.Stage != ""
}
