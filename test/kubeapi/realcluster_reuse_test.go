//go:build e2ecluster

package kubeapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// carol is a developer who sends her own Audit-ID header.
var carol = apiUser{"carol", "carol-token-0123456789", "developers"}

// auditIDHeader sets the Audit-ID request header, which kube-apiserver
// takes as the request's audit ID.
type auditIDHeader struct {
	rt http.RoundTripper
	id string
}

func (h auditIDHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Audit-ID", h.id)
	return h.rt.RoundTrip(r)
}

// execWithAuditID runs cmd in ns/pod's app container as u over
// WebSockets, as kubectl does, with the Audit-ID header set to id (which
// kubectl cannot set), and returns its stdout.
func (c *realCluster) execWithAuditID(t *testing.T, u apiUser, ns, pod, id string, cmd ...string) (string, error) {
	t.Helper()
	cfg := &rest.Config{Host: c.api.admin.Host, BearerToken: u.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.api.admin.TLSClientConfig.CAData,
			ServerName: c.api.admin.TLSClientConfig.ServerName}}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return auditIDHeader{rt: rt, id: id} }
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("building %s's client: %w", u.name, err)
	}
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "app", Command: cmd, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", fmt.Errorf("building the exec: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb}); err != nil {
		return out.String(), fmt.Errorf("streaming the exec: %w: %s", err, errb.String())
	}
	return out.String(), nil
}
