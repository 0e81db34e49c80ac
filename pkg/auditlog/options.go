package auditlog

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/execid/correlator/pkg/vocab"
)

// The options of a streaming request travel in its query string; the
// apiserver decodes them into a PodExecOptions, PodAttachOptions or
// PodPortForwardOptions, and a source may log that object as the request
// body: requestObject at level Request and above (stages after
// RequestReceived), protoPayload.request on GKE. The query is what the
// apiserver acted on, so it wins; the body fills in what the query does not
// say, and a body that says otherwise is flagged vocab.FlagOptionsMismatch.

// execOptions is the union of PodExecOptions, PodAttachOptions and
// PodPortForwardOptions (core/v1). Their bools are omitempty: absent is
// false once the object is there.
type execOptions struct {
	Type      string            `json:"@type"` // GKE: core.k8s.io/v1.PodExecOptions
	Kind      string            `json:"kind"`
	Command   []string          `json:"command"`
	Container string            `json:"container"`
	Stdin     bool              `json:"stdin"`
	TTY       bool              `json:"tty"`
	Ports     []json.RawMessage `json:"ports"`
}

// parseExecOptions reads a logged options object. ok is false for anything
// that is not one (no object, another kind, wrong field types).
func parseExecOptions(body []byte) (o execOptions, ok bool) {
	body = trimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return o, false
	}
	if json.Unmarshal(body, &o) != nil {
		return o, false
	}
	kind := o.Kind
	if kind == "" {
		kind = o.Type[strings.LastIndexByte(o.Type, '.')+1:]
	}
	switch kind {
	case "", "PodExecOptions", "PodAttachOptions", "PodPortForwardOptions":
		return o, true
	}
	return o, false
}

// ports renders the port list as the query spells it.
func (o *execOptions) ports() []string {
	var out []string
	for _, p := range o.Ports {
		var n int64
		var s string
		switch {
		case json.Unmarshal(p, &n) == nil:
			out = append(out, strconv.FormatInt(n, 10))
		case json.Unmarshal(p, &s) == nil:
			out = append(out, s)
		}
	}
	return out
}

// applyOptions fills in from the logged options object what the query left
// unsaid, and flags a disagreement.
func (r *ExecRecord) applyOptions(body json.RawMessage) {
	o, ok := parseExecOptions(body)
	if !ok {
		return
	}
	mismatch := false
	merge := func(have *bool, body bool) *bool {
		if have == nil {
			return boolPtr(body)
		}
		mismatch = mismatch || *have != body
		return have
	}
	if len(r.Command) == 0 {
		r.Command = slices.Clone(o.Command)
	} else if len(o.Command) > 0 && !slices.Equal(r.Command, o.Command) {
		mismatch = true
	}
	if r.Container == "" {
		r.Container = o.Container
	} else if o.Container != "" && o.Container != r.Container {
		mismatch = true
	}
	if r.Subresource != SubresourcePortForward {
		r.Stdin, r.TTY = merge(r.Stdin, o.Stdin), merge(r.TTY, o.TTY)
	}
	if ports := o.ports(); len(r.Ports) == 0 {
		r.Ports = ports
	} else if len(ports) > 0 && !slices.Equal(r.Ports, ports) {
		mismatch = true
	}
	if mismatch {
		r.addFlag(vocab.FlagOptionsMismatch)
	}
}
