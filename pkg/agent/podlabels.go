package agent

import (
	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/execid/correlator/pkg/meta"
)

// podLabelFixedBytes is the rough heap cost of one remembered pod beyond
// its strings.
const podLabelFixedBytes = 128

// podKey names a pod as both sessions (from the audit record) and
// processes (from pkg/meta) do.
type podKey struct{ namespace, pod string }

// podLabelCache remembers the labels pkg/meta resolved for the pods of
// this node's processes, by namespace and pod name, for the alert rules: a
// session names its pod only so, and a process reaches the rules when the
// joiner emits it, which may be long after it was resolved. The latest
// resolution of a pod wins (a pod recreated under its name takes its new
// labels at its first exec). It is bounded by count and by estimated bytes,
// least recently used first out; what it sheds is counted. Only the run
// loop uses it: it has no lock. A nil *podLabelCache keeps nothing.
type podLabelCache struct {
	lru      *simplelru.LRU[podKey, map[string]string]
	maxBytes int
	bytes    int
	evicted  int64
}

func newPodLabelCache(maxPods, maxBytes int) *podLabelCache {
	c := &podLabelCache{maxBytes: maxBytes}
	// The callback sees every removal, evictions and replacements alike;
	// set counts the evictions.
	c.lru, _ = simplelru.NewLRU(maxPods, func(k podKey, l map[string]string) { c.bytes -= podLabelBytes(k, l) })
	return c
}

// set records what info says about its pod's labels: none (or no pod
// name) forgets the pod.
func (c *podLabelCache) set(info *meta.Info) {
	if c == nil || info.Namespace == "" || info.Pod == "" {
		return
	}
	k := podKey{info.Namespace, info.Pod}
	c.lru.Remove(k) // a replacement's bytes go first
	if len(info.Labels) == 0 {
		return
	}
	n := podLabelBytes(k, info.Labels)
	if n > c.maxBytes {
		c.evicted++
		return
	}
	c.bytes += n
	if c.lru.Add(k, info.Labels) {
		c.evicted++
	}
	for c.bytes > c.maxBytes {
		c.lru.RemoveOldest()
		c.evicted++
	}
}

// get returns the pod's labels, nil when unknown. The map is shared with
// pkg/meta: read only.
func (c *podLabelCache) get(namespace, pod string) map[string]string {
	if c == nil || namespace == "" || pod == "" {
		return nil
	}
	l, _ := c.lru.Get(podKey{namespace, pod})
	return l
}

// shed counts the pods let go of to stay within the bounds.
func (c *podLabelCache) shed() int64 {
	if c == nil {
		return 0
	}
	return c.evicted
}

func podLabelBytes(k podKey, l map[string]string) int {
	n := podLabelFixedBytes + len(k.namespace) + len(k.pod)
	for k, v := range l {
		n += pairBytes + len(k) + len(v)
	}
	return n
}
