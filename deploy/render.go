// Package deploy renders and reads correlator's Kubernetes deployment: the
// Helm chart in deploy/helm/correlator and the plain manifests in
// deploy/kubernetes. Its tests decode every object into k8s.io/api types;
// AgentConfig hands the agent's rendered configuration file to anyone who
// wants to run `correlator run --config` with it outside a cluster.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// AgentConfigKey is the ConfigMap key holding `correlator run`'s config file.
const AgentConfigKey = "config.yaml"

// Decoder decodes Kubernetes objects strictly: an unknown or duplicated
// field, or a kind the deployment has no business shipping, is an error.
type Decoder struct {
	dec runtime.Decoder
}

// NewDecoder knows the API groups the deployment uses, and no others.
func NewDecoder() (*Decoder, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme,
		networkingv1.AddToScheme, schedulingv1.AddToScheme,
		// The exec bridge: its webhook configuration and PodDisruptionBudget.
		admissionregistrationv1.AddToScheme, policyv1.AddToScheme,
		// The uninstall hook's Job.
		batchv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return &Decoder{dec: serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()}, nil
}

// Decode decodes one YAML or JSON document.
func (d *Decoder) Decode(doc []byte) (runtime.Object, error) {
	obj, _, err := d.dec.Decode(doc, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding object: %w", err)
	}
	return obj, nil
}

// DecodeAll decodes every non-empty document of a multi-document stream.
func (d *Decoder) DecodeAll(stream []byte) ([]runtime.Object, error) {
	docs, err := Documents(stream)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Object, 0, len(docs))
	for i, doc := range docs {
		obj, err := d.Decode(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

// Documents splits a YAML stream on `---` lines and drops documents that
// hold only comments or whitespace (helm renders those for disabled
// templates).
func Documents(stream []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("splitting YAML documents: %w", err)
		}
		if hasContent(doc) {
			out = append(out, doc)
		}
	}
}

func hasContent(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' && !bytes.Equal(l, []byte("---")) {
			return true
		}
	}
	return false
}

// AgentConfig returns the agent's configuration file from rendered
// manifests: the one ConfigMap that has an AgentConfigKey entry.
func AgentConfig(rendered []byte) ([]byte, error) {
	d, err := NewDecoder()
	if err != nil {
		return nil, err
	}
	objs, err := d.DecodeAll(rendered)
	if err != nil {
		return nil, fmt.Errorf("reading rendered manifests: %w", err)
	}
	var found []string
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			if v, ok := cm.Data[AgentConfigKey]; ok {
				found = append(found, v)
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("finding the agent config: no ConfigMap has a %s key", AgentConfigKey)
	case 1:
		return []byte(found[0]), nil
	}
	return nil, fmt.Errorf("finding the agent config: %d ConfigMaps have a %s key", len(found), AgentConfigKey)
}
