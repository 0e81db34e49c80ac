package auditlog

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// GKE writes Kubernetes audit events as Cloud Audit Logs LogEntry objects
// (https://cloud.google.com/kubernetes-engine/docs/how-to/audit-logging),
// not as audit.k8s.io Events: no auditID, stage, verb or requestURI, and no
// exec query string. docs/install.md (GKE) says what can be read back and
// what cannot; parseGKEEntry rebuilds as much of an Event as the entry holds and
// invents nothing else.

// gkeAuditLogType is protoPayload["@type"] of a Cloud Audit Log entry.
const gkeAuditLogType = "type.googleapis.com/google.cloud.audit.AuditLog"

// gkeMethodPrefix starts the methodName of every Kubernetes API request,
// e.g. io.k8s.core.v1.pods.exec.create.
const gkeMethodPrefix = "io.k8s."

// errNotKubernetes marks a LogEntry of another Google service.
var errNotKubernetes = errors.New("log entry is not a kubernetes audit entry")

// gkeEntry is the part of a LogEntry (google.logging.v2) that matters.
type gkeEntry struct {
	InsertID         string            `json:"insertId"`
	Timestamp        Time              `json:"timestamp"`
	ReceiveTimestamp Time              `json:"receiveTimestamp"`
	Labels           map[string]string `json:"labels"`
	Operation        *struct {
		ID    string `json:"id"`
		First bool   `json:"first"`
		Last  bool   `json:"last"`
	} `json:"operation"`
	ProtoPayload *gkeAuditLog `json:"protoPayload"`
}

// gkeAuditLog is the part of google.cloud.audit.AuditLog that matters.
type gkeAuditLog struct {
	Type               string `json:"@type"`
	ServiceName        string `json:"serviceName"`
	MethodName         string `json:"methodName"`
	ResourceName       string `json:"resourceName"`
	AuthenticationInfo struct {
		PrincipalEmail   string `json:"principalEmail"`
		PrincipalSubject string `json:"principalSubject"`
	} `json:"authenticationInfo"`
	AuthorizationInfo []struct {
		Granted *bool `json:"granted"`
	} `json:"authorizationInfo"`
	RequestMetadata struct {
		CallerIP                string `json:"callerIp"`
		CallerSuppliedUserAgent string `json:"callerSuppliedUserAgent"`
	} `json:"requestMetadata"`
	Status *struct {
		Code    int32  `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	Request json.RawMessage `json:"request"`
}

// isGKEEntry tells a LogEntry with a protoPayload from an Event.
func isGKEEntry(protoPayload json.RawMessage) bool {
	b := trimSpace(protoPayload)
	return len(b) > 0 && b[0] == '{'
}

// gke reads a GKE LogEntry; other services' entries are not events.
func (p *Parser) gke(raw []byte) {
	ev, err := parseGKEEntry(raw)
	switch {
	case errors.Is(err, errNotKubernetes):
		p.skip(ReasonNotAnEvent)
	case err != nil:
		p.skip(decodeReason(err))
	default:
		p.event(&ev)
	}
}

// pubSub reads a Pub/Sub message (bare, or in a push envelope) whose data
// is a LogEntry, or anything else this parser reads.
func (p *Parser) pubSub(raw []byte, depth int) {
	payload, ok, err := decodePubSub(raw)
	switch {
	case !ok && err == nil:
		p.decodeEvent(raw)
	case err != nil || len(trimSpace(payload)) == 0:
		p.skip(ReasonBadEnvelope)
	default:
		p.text(trimSpace(payload), depth+1)
	}
}

// parseGKEEntry turns one GKE LogEntry into the Event it records. It fails
// with errNotKubernetes for other services' entries and with a decoding
// error for wrong field types.
func parseGKEEntry(raw []byte) (Event, error) {
	var le gkeEntry
	if err := json.Unmarshal(raw, &le); err != nil {
		return Event{}, err
	}
	pp := le.ProtoPayload
	if pp == nil || !strings.HasPrefix(pp.MethodName, gkeMethodPrefix) ||
		(pp.ServiceName != "" && pp.ServiceName != "k8s.io") || (pp.Type != "" && pp.Type != gkeAuditLogType) {
		return Event{}, errNotKubernetes
	}
	// resourceName names the object, not the request: it is no requestURI.
	// Should it ever carry a query string, newRecord reads it.
	_, query, _ := strings.Cut(pp.ResourceName, "?")
	ev := Event{
		Verb:        pp.MethodName[strings.LastIndexByte(pp.MethodName, '.')+1:],
		query:       query,
		UserAgent:   pp.RequestMetadata.CallerSuppliedUserAgent,
		ObjectRef:   gkeObjectRef(pp.ResourceName),
		Annotations: le.Labels,
		AuditID:     le.InsertID,
	}
	// GKE documents operation.id as the request's ID; insertId names the
	// entry. They are equal on entries seen so far.
	if op := le.Operation; op != nil && op.ID != "" {
		ev.AuditID = op.ID
	}
	ev.User.Username = pp.AuthenticationInfo.PrincipalEmail
	if ev.User.Username == "" {
		ev.User.Username = pp.AuthenticationInfo.PrincipalSubject
	}
	if ip := pp.RequestMetadata.CallerIP; ip != "" {
		ev.SourceIPs = []string{ip}
	}
	if st := pp.Status; st != nil {
		ev.ResponseStatus = &Status{Code: httpCode(st.Code), Message: st.Message}
	}
	ev.decision = gkeDecision(pp)
	if ref := ev.ObjectRef; ref != nil && ref.Resource == "pods" {
		// The ephemeral container a patch adds; the PodExecOptions (or
		// attach, port-forward options) of a streaming request.
		switch ref.Subresource {
		case SubresourceEphemeralContainers, SubresourceExec, SubresourceAttach, SubresourcePortForward:
			ev.RequestObject = pp.Request
		}
	}
	when := le.Timestamp.Time
	if when.IsZero() {
		when = le.ReceiveTimestamp.Time
	}
	ev.StageTimestamp = Time{when}
	ev.Stage = gkeStage(&le, ev.ObjectRef)
	if op := le.Operation; op == nil || op.First || !op.Last {
		// Only an entry that closes an operation it did not open is
		// stamped later than the request.
		ev.RequestReceivedTimestamp = Time{when}
	}
	return ev, nil
}

// gkeStage maps an entry to the stage the Merger files it under. GKE
// documents one entry per request (operation.first and .last both true);
// an entry that is only first or only last is taken at its word. A
// single-entry exec, attach or port-forward counts as ResponseStarted: the
// entry does not say when the session ended.
func gkeStage(le *gkeEntry, ref *ObjectReference) string {
	if op := le.Operation; op != nil && op.First != op.Last {
		if op.First {
			return StageResponseStarted
		}
		return StageResponseComplete
	}
	if ref != nil {
		switch ref.Subresource {
		case SubresourceExec, SubresourceAttach, SubresourcePortForward:
			return StageResponseStarted
		}
	}
	return StageResponseComplete
}

// gkeDecision reads authorizationInfo: any refused check is a forbid.
func gkeDecision(pp *gkeAuditLog) string {
	decision := ""
	for _, a := range pp.AuthorizationInfo {
		switch {
		case a.Granted == nil:
		case !*a.Granted:
			return "forbid"
		default:
			decision = "allow"
		}
	}
	return decision
}

// gkeObjectRef reads resourceName: <group>/<version>[/namespaces/<ns>]/<resource>[/<name>[/<subresource>]],
// with "core" for the core group. A query string, which GKE does not log
// today, is left to parseRequestURI.
func gkeObjectRef(name string) *ObjectReference {
	name, _, _ = strings.Cut(name, "?")
	parts := strings.Split(name, "/")
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" {
		return nil
	}
	ref := &ObjectReference{APIGroup: parts[0], APIVersion: parts[1]}
	if ref.APIGroup == "core" {
		ref.APIGroup = ""
	}
	rest := parts[2:]
	if len(rest) >= 3 && rest[0] == "namespaces" {
		ref.Namespace, rest = rest[1], rest[2:]
	}
	ref.Resource = rest[0]
	if len(rest) > 1 {
		ref.Name = rest[1]
	}
	if len(rest) > 2 {
		ref.Subresource = rest[2]
	}
	if len(rest) > 3 || ref.Resource == "" {
		return nil
	}
	return ref
}

// httpCode maps a google.rpc.Code to the HTTP status Google's API guide
// pairs it with. 0 (OK) says the request succeeded but not whether the
// apiserver answered 101 or 200, so it maps to 0, "unknown". A value that is
// already an HTTP status is kept.
func httpCode(c int32) int32 {
	switch c {
	case 0:
		return 0
	case 1:
		return 499 // CANCELLED
	case 3, 9, 11:
		return 400 // INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE
	case 4:
		return 504 // DEADLINE_EXCEEDED
	case 5:
		return 404 // NOT_FOUND
	case 6, 10:
		return 409 // ALREADY_EXISTS, ABORTED
	case 7:
		return 403 // PERMISSION_DENIED
	case 8:
		return 429 // RESOURCE_EXHAUSTED
	case 12:
		return 501 // UNIMPLEMENTED
	case 14:
		return 503 // UNAVAILABLE
	case 16:
		return 401 // UNAUTHENTICATED
	case 2, 13, 15:
		return 500 // UNKNOWN, INTERNAL, DATA_LOSS
	}
	if c >= 100 && c <= 599 {
		return c
	}
	return 500
}

// pubSubMessage is a Pub/Sub message: bare, as the pull API and client
// libraries give it, or inside a push subscription's {"message": ...}.
type pubSubMessage struct {
	Data *string `json:"data"`
}

// decodePubSub returns the payload of a Pub/Sub message or push envelope:
// the base64 "data" (standard or URL alphabet, padded or not). ok is false
// when raw is not one.
func decodePubSub(raw []byte) (payload []byte, ok bool, err error) {
	var env struct {
		Message json.RawMessage `json:"message"`
		pubSubMessage
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, false, err
	}
	msg := env.pubSubMessage
	if m := trimSpace(env.Message); len(m) > 0 && m[0] == '{' {
		msg = pubSubMessage{}
		if err := json.Unmarshal(m, &msg); err != nil {
			return nil, true, err
		}
	}
	if msg.Data == nil {
		return nil, false, nil
	}
	b, err := decodeBase64(*msg.Data)
	return b, true, err
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		return nil, err
	}
	return bytes.TrimPrefix(b, utf8BOM), nil
}
