package bridge

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// Kind is what an admission request is, for metrics.
type Kind string

const (
	KindExec      Kind = "exec"
	KindAttach    Kind = "attach"
	KindEphemeral Kind = "ephemeral"
	KindOther     Kind = "other"
)

// Skip reasons: a request answered without a patch.
const (
	SkipAttach       = "attach"        // attach starts no process to carry an ID
	SkipEmptyCommand = "empty_command" // the apiserver refuses it anyway; `env` alone would print the environment
	SkipAnnotated    = "annotated"     // the pod's SkipAnnotation names the container
	SkipWindows      = "windows"       // Windows containers have no env
	SkipNoNew        = "no_new_container"
	SkipNotHandled   = "not_handled" // a resource or operation the bridge does not rewrite
	// SkipUnrewritable: env would not run the command as given (its first
	// word has "=" or is "-", see Rewritable); the exec runs without an ID.
	SkipUnrewritable = "unrewritable_command"
)

// Error reasons: a request answered allowed with no patch because it could
// not be read.
const (
	ErrMalformed    = "malformed"      // not an AdmissionReview with a request
	ErrBadObject    = "bad_object"     // the object is not what the subresource carries
	ErrID           = "id"             // no randomness for the ID
	ErrLookup       = "lookup"         // the pod lookup failed; the exec is rewritten anyway
	ErrBodyTooLarge = "body_too_large" // over MaxBodyBytes, answered 413
)

// Decision is the bridge's answer to one request.
type Decision struct {
	Kind Kind
	// Patch is the JSONPatch to apply, nil when none.
	Patch []byte
	// ID is the injected ID when Patch is set.
	ID string
	// Skip is why nothing was patched (a Skip* reason), Error a reason the
	// request could not be read (an Err* reason) with Err the detail. A
	// lookup error still patches.
	Skip  string
	Error string
	Err   error
	// Container is the exec's container, or the new ephemeral containers.
	Container string
	// CallerKey are the Key* actions on the caller's own key.
	CallerKey []string
}

// PodInfo is what the bridge reads from an exec's pod.
type PodInfo struct {
	Skip       string   // the SkipAnnotation value
	Windows    bool     // spec.os.name is windows
	Containers []string // the regular containers, for an exec naming none
}

// PodSource returns an exec's pod; nil skips the lookup.
type PodSource interface {
	Pod(ctx context.Context, namespace, name string) (PodInfo, error)
}

// Mutator decides. Build it with NewMutator.
type Mutator struct {
	key  string
	rand io.Reader
	pods PodSource
}

// NewMutator returns a Mutator injecting key; rnd is the ID's randomness
// (nil: crypto/rand); pods may be nil.
func NewMutator(key string, rnd io.Reader, pods PodSource) (*Mutator, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	return &Mutator{key: key, rand: rnd, pods: pods}, nil
}

// Key is the injected key.
func (m *Mutator) Key() string { return m.key }

// NewID returns a random UUIDv4 read from r.
func NewID(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("reading randomness for an exec ID: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// Classify names the request's kind from its resource and operation.
func Classify(req *admissionv1.AdmissionRequest) Kind {
	if req.Resource.Group != "" || req.Resource.Resource != "pods" {
		return KindOther
	}
	switch {
	case req.SubResource == "exec" && req.Operation == admissionv1.Connect:
		return KindExec
	case req.SubResource == "attach" && req.Operation == admissionv1.Connect:
		return KindAttach
	case req.SubResource == "ephemeralcontainers" && req.Operation == admissionv1.Update:
		return KindEphemeral
	}
	return KindOther
}

// Decide answers one request. It never fails: a request it cannot read
// gets a Decision with Error set and no patch.
func (m *Mutator) Decide(ctx context.Context, req *admissionv1.AdmissionRequest) Decision {
	d := Decision{Kind: Classify(req)}
	switch d.Kind {
	case KindAttach:
		d.Skip = SkipAttach
	case KindExec:
		m.decideExec(ctx, req, &d)
	case KindEphemeral:
		m.decideEphemeral(req, &d)
	default:
		d.Skip = SkipNotHandled
	}
	return d
}

// fail records a reading error.
func (d *Decision) fail(reason string, err error) {
	d.Error, d.Err, d.Patch, d.ID = reason, err, nil, ""
}

// decodeObject decodes raw into v, checking the kind when raw names one.
func decodeObject(raw []byte, kind string, v any) error {
	if len(raw) == 0 {
		return errors.New("decoding object: none")
	}
	var tm struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &tm); err != nil {
		return fmt.Errorf("decoding object: %w", err)
	}
	if tm.Kind != "" && tm.Kind != kind {
		return fmt.Errorf("decoding object: kind %q, want %s", tm.Kind, kind)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decoding %s: %w", kind, err)
	}
	return nil
}

func (m *Mutator) decideExec(ctx context.Context, req *admissionv1.AdmissionRequest, d *Decision) {
	var opts corev1.PodExecOptions
	if err := decodeObject(req.Object.Raw, "PodExecOptions", &opts); err != nil {
		d.fail(ErrBadObject, err)
		return
	}
	d.Container = opts.Container
	if len(opts.Command) == 0 {
		d.Skip = SkipEmptyCommand
		return
	}
	if !Rewritable(opts.Command) {
		d.Skip = SkipUnrewritable
		return
	}
	if m.pods != nil {
		info, err := m.pods.Pod(ctx, req.Namespace, req.Name)
		if err != nil {
			// Rewrite anyway: the same as running without the lookup, and
			// an unreadable pod must not turn the bridge off.
			d.Error, d.Err = ErrLookup, err
		} else if reason := info.skips(opts.Container); reason != "" {
			d.Skip = reason
			return
		}
	}
	id, err := NewID(m.rand)
	if err != nil {
		d.fail(ErrID, err)
		return
	}
	ops, actions := execPatch(opts.Command, m.key, id)
	patch, err := json.Marshal(ops)
	if err != nil {
		d.fail(ErrBadObject, fmt.Errorf("encoding patch: %w", err))
		return
	}
	d.Patch, d.ID, d.CallerKey = patch, id, actions
}

// skips says why an exec into container is left alone, or "".
func (p PodInfo) skips(container string) string {
	if p.Windows {
		return SkipWindows
	}
	if p.Skip == "" {
		return ""
	}
	if container == "" && len(p.Containers) == 1 {
		container = p.Containers[0] // the apiserver picks the only one
	}
	for _, c := range strings.Split(p.Skip, ",") {
		if c = strings.TrimSpace(c); c == SkipAll || (c != "" && c == container) {
			return SkipAnnotated
		}
	}
	return ""
}
