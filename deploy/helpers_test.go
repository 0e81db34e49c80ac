package deploy

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/execid/correlator/internal/testutil"
)

const (
	chartDir   = "helm/correlator"
	plainDir   = "kubernetes"
	release    = "correlator"
	namespace  = "correlator"
	helmLabel  = "helm.sh/chart"
	managedBy  = "app.kubernetes.io/managed-by"
	checksumAn = "checksum/config"
)

var helmOnce struct {
	sync.Once
	path string
	err  error
}

// helmBin builds the pinned helm once per test binary. It never skips:
// rendering is the point of these tests, and `go install` needs only the
// Go module proxy.
func helmBin(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		dir, err := ToolDir()
		if err != nil {
			helmOnce.err = err
			return
		}
		helmOnce.path, helmOnce.err = EnsureHelm(context.Background(), dir)
	})
	if helmOnce.err != nil {
		t.Fatal(helmOnce.err)
	}
	return helmOnce.path
}

func render(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := RenderChart(t.Context(), helmBin(t), chartDir, release, namespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decoder(t testing.TB) *Decoder {
	t.Helper()
	d, err := NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func renderObjects(t testing.TB, args ...string) []runtime.Object {
	t.Helper()
	objs, err := decoder(t).DecodeAll(render(t, args...))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// only returns the one object of type T named name.
func only[T runtime.Object](t testing.TB, objs []runtime.Object, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if x, ok := o.(T); ok && objectName(o) == name {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T named %q, found %d among %v", zero, name, len(found), kinds(objs))
	}
	return found[0]
}

func objectName(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		return ""
	}
	return m.GetName()
}

// kinds lists "Kind/name" of every object, sorted.
func kinds(objs []runtime.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, kindName(o))
	}
	sort.Strings(out)
	return out
}

func kindName(o runtime.Object) string {
	return o.GetObjectKind().GroupVersionKind().Kind + "/" + objectName(o)
}

// kubectl finds kubectl (testutil.Kubectl).
func kubectl(t testing.TB) string {
	t.Helper()
	return testutil.Kubectl(t)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
