package meta

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// resolveOneLocked asks the runtime about one container, for a miss that
// the listing limit refused: ContainerStatus for its kubelet labels, then
// its pod's sandbox (ListPodSandbox filtered on the pod UID label) for the
// pod's own labels. The answer, and the sandbox, go into the index, so the
// container's later processes hit. The caller holds refreshMu, so a listing
// in flight cannot replace the index without them.
//
// At most StatusLookupRate lookups a second are made: a flood of IDs that
// are not the runtime's (host or non-CRI containers) must not hammer it. A
// refused lookup, and a container the runtime does not know (NotFound), are
// a plain miss, which the cache keeps for NegativeTTL. Any other error is
// returned, as a listing's is, and nothing is indexed: a container whose
// sandbox could not be listed is not taken without its pod's labels.
func (r *criResolver) resolveOneLocked(ctx context.Context, containerID string) (Info, bool, error) {
	if !r.statusLimiter.AllowN(r.now(), 1) {
		r.metrics.criStatus("limited")
		return Info{}, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	info, sandbox, found, err := r.status(ctx, containerID)
	switch {
	case err != nil:
		r.metrics.criStatus("error")
		return Info{}, false, err
	case !found:
		r.metrics.criStatus("not_found")
		return Info{}, false, nil
	}
	r.metrics.criStatus("ok")
	r.mu.Lock()
	if sandbox.ContainerID != "" {
		if _, ok := r.byID[sandbox.ContainerID]; !ok {
			r.byID[sandbox.ContainerID] = sandbox
		}
	}
	r.byID[info.ContainerID] = info
	r.mu.Unlock()
	return info, true, nil
}

// status makes the two calls of resolveOneLocked. sandbox is the zero Info
// when the container has no pod UID label or no sandbox has its pod UID.
func (r *criResolver) status(ctx context.Context, containerID string) (info, sandbox Info, found bool, err error) {
	resp, err := r.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
	if status.Code(err) == codes.NotFound {
		return Info{}, Info{}, false, nil
	}
	if err != nil {
		return Info{}, Info{}, false, fmt.Errorf("getting CRI container status of %s at %s: %w", containerID, r.socket, err)
	}
	st := resp.GetStatus()
	// The runtime may match an ID prefix; the cgroup names the full ID.
	if st == nil || (st.GetId() != "" && !strings.EqualFold(st.GetId(), containerID)) {
		return Info{}, Info{}, false, nil
	}
	info = infoFromCRI(containerID, st.GetLabels(), st.GetMetadata().GetName())
	if info.PodUID == "" {
		return info, Info{}, true, nil
	}
	ps, err := r.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: info.PodUID}},
	})
	if err != nil {
		return Info{}, Info{}, false, fmt.Errorf("listing CRI pod sandboxes of pod %s at %s: %w", info.PodUID, r.socket, err)
	}
	if s := podSandbox(ps.GetItems()); s != nil {
		sandbox = infoFromSandbox(s)
		info.Labels = sandbox.Labels
	}
	return info, sandbox, true, nil
}

// podSandbox picks a pod's current sandbox from those with its UID: a pod
// whose sandbox was recreated has the old one too, not ready. It prefers a
// ready sandbox, then the newest. nil when there is none.
func podSandbox(ps []*runtimeapi.PodSandbox) *runtimeapi.PodSandbox {
	ps = slices.DeleteFunc(slices.Clone(ps), func(s *runtimeapi.PodSandbox) bool { return s.GetId() == "" })
	if len(ps) == 0 {
		return nil
	}
	return slices.MaxFunc(ps, func(a, b *runtimeapi.PodSandbox) int {
		aReady := a.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY
		bReady := b.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY
		if aReady != bReady {
			if aReady {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.GetCreatedAt(), b.GetCreatedAt())
	})
}
