package nodeharness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
)

// execTimeout bounds one exec and one teardown call: it only stops a broken
// test from hanging, like testutil.EventuallyBound.
const execTimeout = 60 * time.Second

// processTypeURL is the type containerd registers the OCI runtime spec's
// Process under (typeurl, "types.containerd.io" + path + major version);
// the shim decodes an exec's spec by it, as JSON.
const processTypeURL = "types.containerd.io/opencontainers/runtime-spec/1/Process"

// MergeExecEnv merges an exec's environment into the container's baseline
// as containerd's CRI does when it honours ExecRequest.envs: it applies
// them with oci.WithEnv (replaceOrAppendEnvValues). The baseline comes
// first, in order. A KEY=VALUE whose key the baseline has replaces that
// entry in place (its last occurrence, when the baseline repeats a key);
// any other is appended, after the baseline, in the order given (a new key
// given twice is appended twice). A bare KEY removes the baseline's entry.
// So an injected KUBERNETES_EXEC_AUDIT_ID is last unless the baseline
// already had one, and never appears twice because of a baseline entry.
func MergeExecEnv(baseline, env []string) []string {
	index := make(map[string]int, len(baseline))
	out := make([]string, 0, len(baseline)+len(env))
	for i, e := range baseline {
		k, _, _ := cutEnv(e)
		out = append(out, e)
		index[k] = i
	}
	for _, e := range env {
		k, _, hasValue := cutEnv(e)
		i, known := index[k]
		switch {
		case !hasValue && known:
			out[i] = "" // removed below
		case !hasValue:
		case known:
			out[i] = e
		default:
			out = append(out, e)
		}
	}
	kept := out[:0]
	for _, e := range out {
		if e != "" {
			kept = append(kept, e)
		}
	}
	return kept
}

// cutEnv splits KEY=VALUE; hasValue is false for a bare KEY.
func cutEnv(e string) (key, value string, hasValue bool) {
	return strings.Cut(e, "=")
}

// execProcess returns the exec's process spec: the container's own
// (user, cwd, capabilities, rlimits, no_new_privileges, AppArmor and
// SELinux labels untouched), with args replaced by cmd, no terminal, and
// the environment merge(baseline). Unknown fields pass through as they are.
func execProcess(spec []byte, cmd []string, merge func(baseline []string) []string) (process []byte, env []string, err error) {
	var s struct {
		Process map[string]json.RawMessage `json:"process"`
	}
	if err := json.Unmarshal(spec, &s); err != nil {
		return nil, nil, fmt.Errorf("decoding container spec: %w", err)
	}
	if s.Process == nil {
		return nil, nil, errors.New("decoding container spec: no process")
	}
	var baseline []string
	if raw, ok := s.Process["env"]; ok {
		if err := json.Unmarshal(raw, &baseline); err != nil {
			return nil, nil, fmt.Errorf("decoding container spec's process env: %w", err)
		}
	}
	env = merge(baseline)
	for key, v := range map[string]any{"args": cmd, "env": env, "terminal": false} {
		if s.Process[key], err = json.Marshal(v); err != nil {
			return nil, nil, fmt.Errorf("encoding exec process %s: %w", key, err)
		}
	}
	if process, err = json.Marshal(s.Process); err != nil {
		return nil, nil, fmt.Errorf("encoding exec process: %w", err)
	}
	return process, env, nil
}

// Exec is a process started in a container through containerd's task API.
type Exec struct {
	n           *Node
	ContainerID string
	ID          string
	// Pid is the process's host PID.
	Pid int
	// Env is the environment its process spec carried (MergeExecEnv's
	// result for StartExec).
	Env []string
	out string
}

// taskCtx is a context for containerd's own API, in the CRI's namespace.
func (n *Node) taskCtx(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(n.ctx, timeout)
	return metadata.AppendToOutgoingContext(ctx, "containerd-namespace", Namespace), cancel
}

// StartExec starts cmd in a container the way a KEP-6035 runtime's CRI
// server does: the container's process spec, the command replaced, env
// merged into the baseline (MergeExecEnv), then containerd's task API
// Exec and Start, which go to the shim and `runc exec`. Its stdout and
// stderr go, together, to a file Wait reads.
//
// Note that runc (1.1 and later) sets the environment it is given through
// Go's os.Setenv before exec: a key given twice reaches the process once,
// at its first position, with its last value. So a merge that appended a
// duplicate key could not be told from one that replaced it by looking at
// the process; Exec.Env is what was asked for.
func (n *Node) StartExec(containerID string, cmd []string, env ...string) (*Exec, error) {
	return n.startExec(containerID, cmd, func(baseline []string) []string { return MergeExecEnv(baseline, env) })
}

// StartExecExactEnv is StartExec with exactly env, in that order, instead
// of the baseline merged: to put a key first (KEP-6035's order), in the
// middle, or twice.
func (n *Node) StartExecExactEnv(containerID string, cmd, env []string) (*Exec, error) {
	return n.startExec(containerID, cmd, func([]string) []string { return slices.Clone(env) })
}

func (n *Node) startExec(containerID string, cmd []string, merge func([]string) []string) (*Exec, error) {
	ctx, cancel := n.taskCtx(execTimeout)
	defer cancel()
	c, err := n.containers.Get(ctx, &containersapi.GetContainerRequest{ID: containerID})
	if err != nil {
		return nil, fmt.Errorf("getting container %s: %w", containerID, err)
	}
	process, env, err := execProcess(c.GetContainer().GetSpec().GetValue(), cmd, merge)
	if err != nil {
		return nil, fmt.Errorf("building exec of container %s: %w", containerID, err)
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	e := &Exec{n: n, ContainerID: containerID, ID: id, Env: env, out: filepath.Join(n.layout.Exec, id+".out")}
	// The runc shim writes a file:// stdio itself; no FIFOs to serve.
	uri := "file://" + e.out
	_, err = n.tasks.Exec(ctx, &tasksapi.ExecProcessRequest{
		ContainerID: containerID, ExecID: id, Stdout: uri, Stderr: uri,
		Spec: &anypb.Any{TypeUrl: processTypeURL, Value: process},
	})
	if err != nil {
		return nil, fmt.Errorf("creating exec %q in container %s: %w", cmd, containerID, err)
	}
	started, err := n.tasks.Start(ctx, &tasksapi.StartRequest{ContainerID: containerID, ExecID: id})
	if err != nil {
		_, _ = n.tasks.DeleteProcess(ctx, &tasksapi.DeleteProcessRequest{ContainerID: containerID, ExecID: id})
		return nil, fmt.Errorf("starting exec %q in container %s: %w", cmd, containerID, err)
	}
	e.Pid = int(started.GetPid())
	return e, nil
}

// Wait waits for the exec to exit, deletes it (the shim has then written
// all its output), and returns its exit code and combined output.
func (e *Exec) Wait() (exitCode uint32, output string, err error) {
	ctx, cancel := e.n.taskCtx(execTimeout)
	defer cancel()
	resp, err := e.n.tasks.Wait(ctx, &tasksapi.WaitRequest{ContainerID: e.ContainerID, ExecID: e.ID})
	if err != nil {
		return 0, "", fmt.Errorf("waiting for exec %s in container %s: %w", e.ID, e.ContainerID, err)
	}
	if _, err := e.n.tasks.DeleteProcess(ctx, &tasksapi.DeleteProcessRequest{ContainerID: e.ContainerID, ExecID: e.ID}); err != nil {
		return 0, "", fmt.Errorf("deleting exec %s in container %s: %w", e.ID, e.ContainerID, err)
	}
	b, err := os.ReadFile(e.out)
	if err != nil {
		return 0, "", fmt.Errorf("reading output of exec %s: %w", e.ID, err)
	}
	os.Remove(e.out)
	return resp.GetExitStatus(), string(b), nil
}

// Kill signals the exec's process through the task API.
func (e *Exec) Kill(sig syscall.Signal) error {
	ctx, cancel := e.n.taskCtx(execTimeout)
	defer cancel()
	_, err := e.n.tasks.Kill(ctx, &tasksapi.KillRequest{ContainerID: e.ContainerID, ExecID: e.ID, Signal: uint32(sig)})
	if err != nil {
		return fmt.Errorf("killing exec %s in container %s: %w", e.ID, e.ContainerID, err)
	}
	return nil
}

// ExecWithEnv runs cmd to its end through StartExec and returns its
// combined stdout and stderr; a non-zero exit is an error carrying it.
func (n *Node) ExecWithEnv(containerID string, cmd []string, env ...string) (string, error) {
	e, err := n.StartExec(containerID, cmd, env...)
	if err != nil {
		return "", err
	}
	code, out, err := e.Wait()
	if err != nil {
		return out, err
	}
	if code != 0 {
		return out, fmt.Errorf("running exec %q in container %s: exit status %d", cmd, containerID, code)
	}
	return out, nil
}

// randomID is an exec ID: containerd's CRI uses 32 random hex digits.
func randomID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random exec ID: %w", err)
	}
	return hex.EncodeToString(b), nil
}
