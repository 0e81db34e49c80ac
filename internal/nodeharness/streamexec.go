package nodeharness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/websocket"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The channel.k8s.io websocket protocol, version 4, of the CRI streaming
// server: every binary message starts with its channel's number, and the
// error channel carries the exit as a JSON metav1.Status.
const (
	streamProtocol = "v4.channel.k8s.io"
	channelStdout  = 1
	channelStderr  = 2
	channelError   = 3
)

// streamStatus is the part of metav1.Status the error channel carries.
type streamStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// CRIStreamExec runs cmd in a container the way the kubelet serves
// `kubectl exec`: the CRI's Exec returns a URL on the runtime's streaming
// server, and the streams run over it (here as a websocket, which the
// kubelet's and containerd's streaming servers accept besides SPDY). The
// request has no environment, as containerd 1.6's CRI has none: the
// fallback path. It returns stdout and stderr; a non-zero exit is an error.
func (n *Node) CRIStreamExec(containerID string, cmd []string) (stdout, stderr string, err error) {
	resp, err := n.Runtime.Exec(n.ctx, &runtimeapi.ExecRequest{
		ContainerId: containerID, Cmd: cmd, Stdout: true, Stderr: true})
	if err != nil {
		return "", "", fmt.Errorf("requesting CRI exec %q in container %s: %w", cmd, containerID, err)
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		return "", "", fmt.Errorf("parsing CRI exec URL %q: %w", resp.GetUrl(), err)
	}
	origin := *u
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	cfg, err := websocket.NewConfig(u.String(), origin.String())
	if err != nil {
		return "", "", fmt.Errorf("configuring stream to %s: %w", u, err)
	}
	cfg.Protocol = []string{streamProtocol}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		return "", "", fmt.Errorf("opening exec stream %s: %w", u, err)
	}
	defer ws.Close()
	if err := ws.SetReadDeadline(time.Now().Add(execTimeout)); err != nil {
		return "", "", fmt.Errorf("setting exec stream deadline: %w", err)
	}
	var out, errOut strings.Builder
	var status *streamStatus
	for {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return out.String(), errOut.String(), fmt.Errorf("reading exec stream: %w", err)
		}
		if len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case channelStdout:
			out.Write(msg[1:])
		case channelStderr:
			errOut.Write(msg[1:])
		case channelError:
			if len(msg) > 1 {
				status = &streamStatus{}
				if err := json.Unmarshal(msg[1:], status); err != nil {
					return out.String(), errOut.String(), fmt.Errorf("decoding exec status %q: %w", msg[1:], err)
				}
			}
		}
	}
	switch {
	case status == nil:
		return out.String(), errOut.String(), errors.New("reading exec stream: closed with no status")
	case status.Status != "Success":
		return out.String(), errOut.String(), fmt.Errorf("running CRI exec %q in container %s: %s (%s)", cmd, containerID, status.Message, status.Reason)
	}
	return out.String(), errOut.String(), nil
}
