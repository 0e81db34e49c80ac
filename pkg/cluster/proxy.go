package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/execid/correlator/pkg/api"
)

// ErrNotFound is an agent's 404: it does not hold the session.
var ErrNotFound = errors.New("not found on this node")

// AgentError is an error an agent itself answered (its JSON error body),
// as opposed to one from kube-apiserver or the network.
type AgentError struct {
	Code int
	Msg  string
}

func (e *AgentError) Error() string {
	return fmt.Sprintf("agent answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Msg)
}

// Is makes an agent's 404 ErrNotFound.
func (e *AgentError) Is(target error) bool {
	return target == ErrNotFound && e.Code == http.StatusNotFound
}

// get asks one agent through the pod proxy:
// /api/v1/namespaces/NS/pods/[https:]POD:PORT/proxy/PATH?Q. kube-apiserver
// removes Authorization before proxying, so the caller's token travels in
// api.ProxyAuthHeader.
func (c *Client) get(ctx context.Context, a Agent, path string, q url.Values, out any) error {
	req := c.core.RESTClient().Get().Namespace(a.Namespace).Resource("pods").Name(a.proxyName()).
		SubResource("proxy").Suffix(path)
	for k, vs := range q {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	if c.token != "" {
		req = req.SetHeader(api.ProxyAuthHeader, "Bearer "+c.token)
	}
	res := req.Do(ctx)
	var code int
	res.StatusCode(&code)
	body, err := res.Raw()
	if code != 0 && code/100 != 2 {
		if e := agentError(code, body); e != nil {
			return e
		}
		// kube-apiserver's own refusal (RBAC on pods/proxy, an agent it
		// cannot reach): Error decodes its Status, which Raw reports as
		// "unknown" when the Status came as protobuf.
		if e := res.Error(); e != nil {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("querying agent pod %s through kube-apiserver: %w", a.Pod, err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding the answer of agent pod %s: %w", a.Pod, err)
	}
	return nil
}

// agentError reads the agent's {"error": "..."} body; kube-apiserver's
// own errors are Status objects (kind: Status) and are not the agent's.
func agentError(code int, body []byte) *AgentError {
	var e struct {
		Kind  string  `json:"kind"`
		Error *string `json:"error"`
	}
	if json.NewDecoder(bytes.NewReader(body)).Decode(&e) != nil || e.Kind != "" || e.Error == nil {
		return nil
	}
	return &AgentError{Code: code, Msg: *e.Error}
}
