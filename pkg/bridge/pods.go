package bridge

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// GetPod fetches a pod from the API.
type GetPod func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// NewGetPod returns a GetPod for cfg (in-cluster: the service account
// needs get on pods).
func NewGetPod(cfg *rest.Config) (GetPod, error) {
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the pods client: %w", err)
	}
	return func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		return c.Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	}, nil
}

// PodCache is a PodSource that remembers each pod's PodInfo for a TTL, so
// a burst of execs into one pod costs one lookup; an annotation change is
// seen within the TTL. Errors are not cached.
type PodCache struct {
	get     GetPod
	timeout time.Duration
	cache   *expirable.LRU[string, PodInfo]
}

// NewPodCache wraps get with a cache of size entries kept for ttl; each
// lookup is bounded by timeout.
func NewPodCache(get GetPod, size int, ttl, timeout time.Duration) *PodCache {
	return &PodCache{get: get, timeout: timeout, cache: expirable.NewLRU[string, PodInfo](size, nil, ttl)}
}

// Pod implements PodSource.
func (c *PodCache) Pod(ctx context.Context, namespace, name string) (PodInfo, error) {
	k := namespace + "/" + name
	if info, ok := c.cache.Get(k); ok {
		return info, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	pod, err := c.get(ctx, namespace, name)
	if err != nil {
		return PodInfo{}, fmt.Errorf("looking up pod %s: %w", k, err)
	}
	info := InfoOf(pod)
	c.cache.Add(k, info)
	return info, nil
}

// InfoOf reads a pod's PodInfo.
func InfoOf(pod *corev1.Pod) PodInfo {
	info := PodInfo{Skip: pod.Annotations[SkipAnnotation]}
	info.Windows = (pod.Spec.OS != nil && pod.Spec.OS.Name == corev1.Windows) ||
		pod.Spec.NodeSelector[corev1.LabelOSStable] == string(corev1.Windows)
	for _, c := range pod.Spec.Containers {
		info.Containers = append(info.Containers, c.Name)
	}
	return info
}
