package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// execPatch returns the operations turning cmd into
// [env, key=id, sanitized cmd...], and the actions on the caller's key.
// An untouched command is prepended to with two adds, so the patch stays
// small however long the command; a sanitized one is replaced whole.
func execPatch(cmd []string, key, id string) ([]patchOp, []string) {
	clean, actions := sanitize(cmd, key, id)
	assign := key + "=" + id
	if len(actions) == 0 || (len(clean) == len(cmd) && slices.Equal(clean, cmd)) {
		return []patchOp{
			{Op: "add", Path: "/command/0", Value: assign},
			{Op: "add", Path: "/command/0", Value: "env"},
		}, actions
	}
	full := append([]string{"env", assign}, clean...)
	return []patchOp{{Op: "replace", Path: "/command", Value: full}}, actions
}

// decideEphemeral sets the key in each new ephemeral container's env: the
// runtime starts it with that environment, so no `env` binary is needed,
// and the pod's SkipAnnotation does not apply.
func (m *Mutator) decideEphemeral(req *admissionv1.AdmissionRequest, d *Decision) {
	var pod, old corev1.Pod
	if err := decodeObject(req.Object.Raw, "Pod", &pod); err != nil {
		d.fail(ErrBadObject, err)
		return
	}
	// Without the old pod every ephemeral container looks new; the
	// apiserver always sends it for an update.
	if err := decodeObject(req.OldObject.Raw, "Pod", &old); err != nil {
		d.fail(ErrBadObject, fmt.Errorf("old object: %w", err))
		return
	}
	existing := map[string]bool{}
	for _, c := range old.Spec.EphemeralContainers {
		existing[c.Name] = true
	}
	for _, s := range pod.Status.EphemeralContainerStatuses {
		existing[s.Name] = true
	}
	var fresh []int
	for i, c := range pod.Spec.EphemeralContainers {
		if !existing[c.Name] {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) == 0 {
		d.Skip = SkipNoNew
		return
	}
	id, err := NewID(m.rand)
	if err != nil {
		d.fail(ErrID, err)
		return
	}
	var ops []patchOp
	var names []string
	for _, i := range fresh {
		c := pod.Spec.EphemeralContainers[i]
		n := len(c.Env)
		env := slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool { return e.Name == m.key })
		if len(env) != n {
			d.CallerKey = append(d.CallerKey, KeyOverwritten)
		}
		env = append(env, corev1.EnvVar{Name: m.key, Value: id})
		// "add" upserts: env is omitempty, so it may be absent.
		ops = append(ops, patchOp{Op: "add", Path: "/spec/ephemeralContainers/" + strconv.Itoa(i) + "/env", Value: env})
		names = append(names, c.Name)
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		d.fail(ErrBadObject, fmt.Errorf("encoding patch: %w", err))
		return
	}
	d.Patch, d.ID, d.Container = patch, id, strings.Join(names, ",")
}

// errNoRequest: an AdmissionReview without a request.
var errNoRequest = errors.New("decoding admission review: no request")
