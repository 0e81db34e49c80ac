package bridge

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodCache: a burst of execs into one pod costs one lookup, errors are
// not remembered, and each lookup is bounded.
func TestPodCache(t *testing.T) {
	calls := 0
	var fail error
	get := func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("lookup without a deadline")
		}
		if fail != nil {
			return nil, fail
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{SkipAnnotation: "app"}}}, nil
	}
	c := NewPodCache(get, 16, time.Hour, time.Second)
	for range 5 {
		info, err := c.Pod(t.Context(), "shop", "web-0")
		if err != nil || info.Skip != "app" {
			t.Fatalf("Pod = %+v, %v", info, err)
		}
	}
	if calls != 1 {
		t.Errorf("%d lookups for one pod, want 1", calls)
	}
	fail = errLookup
	for range 2 {
		if _, err := c.Pod(t.Context(), "shop", "web-1"); !errors.Is(err, errLookup) {
			t.Fatalf("error %v", err)
		}
	}
	if calls != 3 {
		t.Errorf("%d lookups, want the failed one asked again", calls)
	}
}
