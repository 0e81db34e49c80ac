package auditlog

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// ExecRecord is one streaming request (exec, attach, portforward, or an
// ephemeral-container change) with all of its audit stages merged.
type ExecRecord struct {
	AuditID string `json:"auditID"`
	// Stages lists the audit stages seen; an event that names no stage adds
	// none, so it may be empty.
	Stages           []string  `json:"stages,omitempty"`
	Verb             string    `json:"verb"`
	Subresource      string    `json:"subresource"`
	User             UserInfo  `json:"user"`
	ImpersonatedUser *UserInfo `json:"impersonatedUser,omitempty"`
	SourceIPs        []string  `json:"sourceIPs,omitempty"`
	UserAgent        string    `json:"userAgent,omitempty"`
	Namespace        string    `json:"namespace"`
	Pod              string    `json:"pod"`
	// Container is the container= parameter, or for ephemeralcontainers the
	// name of the container the patch adds. Empty means the pod's only one.
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	Env       []string `json:"env,omitempty"`
	Ports     []string `json:"ports,omitempty"`
	// Stdin and TTY are nil when the log did not say.
	Stdin    *bool  `json:"stdin,omitempty"`
	TTY      *bool  `json:"tty,omitempty"`
	Code     int32  `json:"code,omitempty"`
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason,omitempty"`

	// RequestURI is the request's path and query as the apiserver logged
	// it; empty when the source gives none (GKE).
	RequestURI               string    `json:"requestURI,omitempty"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp,omitzero"`
	// EndTimestamp is the ResponseComplete (or Panic) stage time: for a
	// streaming request, when the session ended.
	EndTimestamp time.Time         `json:"endTimestamp,omitzero"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Flags        []string          `json:"flags,omitempty"`
}

// Effective returns who the request ran as: the impersonated user if any.
func (r *ExecRecord) Effective() UserInfo {
	if r.ImpersonatedUser != nil {
		return *r.ImpersonatedUser
	}
	return r.User
}

// Complete reports whether the session-ending stage has been seen.
func (r *ExecRecord) Complete() bool {
	return slices.Contains(r.Stages, StageResponseComplete) || slices.Contains(r.Stages, StagePanic)
}

// HasFlag reports whether f is set.
func (r *ExecRecord) HasFlag(f string) bool { return slices.Contains(r.Flags, f) }

func (r *ExecRecord) addFlag(f string) {
	if !r.HasFlag(f) {
		r.Flags = append(r.Flags, f)
		slices.Sort(r.Flags)
	}
}

// Clone deep-copies r, so callers (the Merger, the joiner) never share state.
func (r *ExecRecord) Clone() ExecRecord {
	c := *r
	c.Stages = slices.Clone(r.Stages)
	c.User = cloneUser(r.User)
	if r.ImpersonatedUser != nil {
		u := cloneUser(*r.ImpersonatedUser)
		c.ImpersonatedUser = &u
	}
	c.SourceIPs = slices.Clone(r.SourceIPs)
	c.Command = slices.Clone(r.Command)
	c.Env = slices.Clone(r.Env)
	c.Ports = slices.Clone(r.Ports)
	c.Annotations = maps.Clone(r.Annotations)
	c.Stdin, c.TTY = cloneBool(r.Stdin), cloneBool(r.TTY)
	c.Flags = slices.Clone(r.Flags)
	return c
}

func orFalse(b *bool) *bool {
	if b == nil {
		return boolPtr(false)
	}
	return b
}

func cloneBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	return boolPtr(*b)
}

func cloneUser(u UserInfo) UserInfo {
	u.Groups = slices.Clone(u.Groups)
	if u.Extra != nil {
		extra := make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			extra[k] = slices.Clone(v)
		}
		u.Extra = extra
	}
	return u
}

// newRecord builds the request-level part of a record from its first event.
func newRecord(ev *Event) *ExecRecord {
	r := &ExecRecord{
		AuditID:          ev.AuditID,
		Verb:             ev.Verb,
		User:             cloneUser(ev.User),
		SourceIPs:        slices.Clone(ev.SourceIPs),
		UserAgent:        ev.UserAgent,
		RequestURI:       ev.RequestURI,
		ImpersonatedUser: nil,
	}
	if ev.ImpersonatedUser != nil {
		u := cloneUser(*ev.ImpersonatedUser)
		r.ImpersonatedUser = &u
	}
	uri := ev.RequestURI
	if uri == "" && ev.query != "" {
		uri = "?" + ev.query
	}
	path, params := parseRequestURI(uri)
	if ref := ev.ObjectRef; ref != nil {
		r.Namespace, r.Pod, r.Subresource = ref.Namespace, ref.Name, ref.Subresource
	}
	if r.Namespace == "" {
		r.Namespace = path.Namespace
	}
	if r.Pod == "" {
		r.Pod = path.Pod
	}
	if r.Subresource == "" {
		r.Subresource = path.Subresource
	}
	r.Command, r.Env, r.Ports = params.Command, params.Env, params.Ports
	r.Container, r.Stdin, r.TTY = params.Container, params.Stdin, params.TTY
	if params.DecodeError {
		r.addFlag(vocab.FlagURIDecodeError)
	}
	if _, q, _ := strings.Cut(uri, "?"); q != "" && (r.Subresource == SubresourceExec || r.Subresource == SubresourceAttach) {
		// The apiserver reads an absent stdin= or tty= as false; only a
		// source without the query leaves them unknown.
		r.Stdin, r.TTY = orFalse(r.Stdin), orFalse(r.TTY)
	}
	switch r.Subresource {
	case SubresourceEphemeralContainers:
		r.applyEphemeral(ev.RequestObject)
	case SubresourceExec, SubresourceAttach, SubresourcePortForward:
		r.applyOptions(ev.RequestObject)
	}
	if ev.AuditID == "" || ev.missingID {
		r.addFlag(vocab.FlagMissingAuditID)
	}
	if ev.legacy {
		r.addFlag(vocab.FlagLegacyFormat)
	}
	if ev.idCut {
		r.addFlag(vocab.FlagAuditIDTruncated)
	}
	return r
}

// applyEphemeral takes the container the patch adds (kubectl debug sends a
// strategic merge patch holding just the new one) from the request body,
// present at level Request and above.
func (r *ExecRecord) applyEphemeral(body json.RawMessage) {
	if len(body) == 0 {
		return
	}
	var obj struct {
		Spec struct {
			EphemeralContainers []struct {
				Name    string   `json:"name"`
				Command []string `json:"command"`
				Args    []string `json:"args"`
				Stdin   *bool    `json:"stdin"`
				TTY     *bool    `json:"tty"`
			} `json:"ephemeralContainers"`
		} `json:"spec"`
	}
	if json.Unmarshal(body, &obj) != nil || len(obj.Spec.EphemeralContainers) == 0 {
		return
	}
	c := obj.Spec.EphemeralContainers[len(obj.Spec.EphemeralContainers)-1]
	r.Container = c.Name
	r.Command = append(slices.Clone(c.Command), c.Args...)
	// Container.stdin and .tty are omitempty: absent is false.
	r.Stdin, r.TTY = boolPtr(c.Stdin != nil && *c.Stdin), boolPtr(c.TTY != nil && *c.TTY)
}

// ranks remember which stage last set order-sensitive fields.
type ranks struct{ code, annotations int }

// stageRank orders stages so merged fields do not depend on arrival order.
func stageRank(s string) int {
	switch s {
	case StageRequestReceived:
		return 0
	case StageResponseStarted:
		return 1
	case StageResponseComplete:
		return 2
	case StagePanic:
		return 3
	}
	return 4
}

// apply folds one stage into the record. Later stages win for the response
// code and annotations whatever order the stages arrive in.
func (r *ExecRecord) apply(ev *Event, rk *ranks) {
	if ev.Stage != "" {
		r.Stages = append(r.Stages, ev.Stage)
	}
	slices.SortFunc(r.Stages, func(a, b string) int { return stageRank(a) - stageRank(b) })
	rank := stageRank(ev.Stage)
	if ev.ResponseStatus != nil && ev.ResponseStatus.Code != 0 && rank >= rk.code {
		r.Code = ev.ResponseStatus.Code
		rk.code = rank
	}
	if len(ev.Annotations) > 0 {
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		for k, v := range ev.Annotations {
			if _, ok := r.Annotations[k]; !ok || rank >= rk.annotations {
				r.Annotations[k] = v
			}
		}
		rk.annotations = max(rk.annotations, rank)
		r.Decision = r.Annotations[AnnotationDecision]
		r.Reason = r.Annotations[AnnotationReason]
	}
	if r.Decision == "" && ev.decision != "" {
		r.Decision = ev.decision
	}
	if r.RequestReceivedTimestamp.IsZero() {
		r.RequestReceivedTimestamp = receivedTime(ev)
	}
	if len(ev.RequestObject) > 0 {
		// A body the first stage may have lacked (RequestReceived never
		// has one); for the first stage this repeats newRecord.
		switch r.Subresource {
		case SubresourceExec, SubresourceAttach, SubresourcePortForward:
			r.applyOptions(ev.RequestObject)
		}
	}
	if ev.Stage == StageResponseComplete || ev.Stage == StagePanic {
		r.EndTimestamp = ev.StageTimestamp.Time
	}
}

// receivedTime falls back to the v1beta1 clocks for old captures.
func receivedTime(ev *Event) time.Time {
	switch {
	case !ev.RequestReceivedTimestamp.IsZero():
		return ev.RequestReceivedTimestamp.Time
	case ev.Stage == StageRequestReceived && !ev.StageTimestamp.IsZero():
		return ev.StageTimestamp.Time
	case ev.Metadata != nil && !ev.Metadata.CreationTimestamp.IsZero():
		return ev.Metadata.CreationTimestamp.Time
	}
	return ev.Timestamp.Time
}
