package meta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// stubResolver is a test double: it answers from a map, or with err, and
// records that it was asked.
type stubResolver struct {
	name    string
	answers map[string]Info
	err     error
	asked   *[]string
}

func (s stubResolver) Resolve(_ context.Context, containerID, podUID string) (Info, bool, error) {
	if s.asked != nil {
		*s.asked = append(*s.asked, s.name)
	}
	if s.err != nil {
		return Info{}, false, s.err
	}
	info, ok := s.answers[containerID]
	return info, ok, nil
}

func TestChainOrder(t *testing.T) {
	partialA := Info{ContainerID: cidA, PodUID: uidA}
	errDown := errors.New("connection refused")
	tests := []struct {
		name       string
		first      map[string]Info
		second     map[string]Info
		secondErr  error
		cid, uid   string
		want       Info
		wantFound  bool
		wantAsked  string
		wantErr    string
		wantSource string
	}{
		{name: "first source wins, second not asked", first: map[string]Info{cidA: infoA}, second: map[string]Info{cidA: infoB},
			cid: cidA, uid: uidA, want: infoA, wantFound: true, wantAsked: "first", wantSource: "first"},
		{name: "second answers a miss of the first", second: map[string]Info{cidA: infoA},
			cid: cidA, uid: uidA, want: infoA, wantFound: true, wantAsked: "first,second", wantSource: "second"},
		{name: "cgroup fallback when both miss", cid: cidA, uid: uidA,
			want: partialA, wantFound: true, wantAsked: "first,second", wantSource: "cgroup"},
		{name: "a later complete answer beats an earlier partial one", first: map[string]Info{cidA: partialA}, second: map[string]Info{cidA: infoA},
			cid: cidA, uid: uidA, want: infoA, wantFound: true, wantAsked: "first,second", wantSource: "second"},
		{name: "an earlier partial answer beats the cgroup's", first: map[string]Info{cidA: {ContainerID: cidA, PodUID: uidA, Container: "x"}},
			cid: cidA, uid: uidA, want: Info{ContainerID: cidA, PodUID: uidA, Container: "x"}, wantFound: true, wantAsked: "first,second", wantSource: "first"},
		{name: "a source error falls back without error", secondErr: errDown, cid: cidA, uid: uidA,
			want: partialA, wantFound: true, wantAsked: "first,second", wantSource: "cgroup"},
		{name: "a source error with nothing found is returned", secondErr: errDown, cid: cidA,
			wantAsked: "first,second", wantErr: "through second: connection refused", wantSource: "none"},
		{name: "nothing known", cid: cidB, wantAsked: "first,second", wantSource: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []string
			m, err := newMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			c := newChain(zerolog.Nop(), m,
				source{"first", stubResolver{name: "first", answers: tt.first, asked: &asked}},
				source{"second", stubResolver{name: "second", answers: tt.second, err: tt.secondErr, asked: &asked}},
				source{"cgroup", CgroupFallback{}},
			)
			got, found, err := c.Resolve(context.Background(), tt.cid, tt.uid)
			if !reflect.DeepEqual(got, tt.want) || found != tt.wantFound {
				t.Errorf("Resolve() = %+v, %v; want %+v, %v", got, found, tt.want, tt.wantFound)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Resolve() error = %v, want %q", err, tt.wantErr)
			}
			if !errors.Is(err, errDown) && tt.wantErr != "" {
				t.Errorf("Resolve() error %v does not wrap the source's error", err)
			}
			if strings.Join(asked, ",") != tt.wantAsked {
				t.Errorf("asked %v, want %s", asked, tt.wantAsked)
			}
			if n := testutil.ToFloat64(m.resolvedBy.WithLabelValues(tt.wantSource)); n != 1 {
				t.Errorf("resolved_total{source=%q} = %v, want 1", tt.wantSource, n)
			}
			if tt.secondErr != nil {
				if n := testutil.ToFloat64(m.sourceErrors.WithLabelValues("second")); n != 1 {
					t.Errorf("source_errors_total{source=second} = %v, want 1", n)
				}
			}
		})
	}
}

func TestCgroupFallback(t *testing.T) {
	got, found, err := CgroupFallback{}.Resolve(context.Background(), cidA, uidA)
	if err != nil || !found || !reflect.DeepEqual(got, Info{ContainerID: cidA, PodUID: uidA}) {
		t.Fatalf("Resolve() = %+v, %v, %v", got, found, err)
	}
	if _, found, _ := (CgroupFallback{}).Resolve(context.Background(), cidA, ""); found {
		t.Fatal("found without a pod UID")
	}
}

// TestNewPodMapThenCgroup composes the real chain: the pod map answers what it
// knows, and the cgroup pod UID answers the rest.
func TestNewPodMapThenCgroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods.json")
	if err := os.WriteFile(path, []byte(`[{"containerID":"`+cidA+`","podUID":"`+uidA+`","namespace":"default","pod":"web-0","container":"nginx"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{PodMapPath: path} // zero fields take the defaults
	reg := prometheus.NewRegistry()
	s, err := New(cfg, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Run(context.Background()) // no CRI socket: returns at once
	ctx := context.Background()
	if got, found, err := s.Resolve(ctx, cidA, uidA); err != nil || !found || !reflect.DeepEqual(got, infoA) {
		t.Fatalf("pod map: %+v, %v, %v", got, found, err)
	}
	if got, found, err := s.Resolve(ctx, cidB, uidB); err != nil || !found || !reflect.DeepEqual(got, Info{ContainerID: cidB, PodUID: uidB}) {
		t.Fatalf("cgroup: %+v, %v, %v", got, found, err)
	}
	if _, found, err := s.Resolve(ctx, cidB, ""); err != nil || found {
		t.Fatalf("unknown: %v, %v", found, err)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no correlator_meta_* metrics registered")
	}
	if _, err := New(cfg, zerolog.Nop(), reg); err == nil || !strings.Contains(err.Error(), "registering meta metrics") {
		t.Fatalf("registering twice: error = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: Validate() = %v, want the defaults", err)
	}
	cfg := Default()
	cfg.CacheSize = -1
	cfg.NegativeTTL = -1
	cfg.CRISocket = "/x.sock"
	cfg.CRITimeout = -time.Second
	err := cfg.Validate()
	for _, want := range []string{"cache size -1", "negative TTL", "CRI timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	if _, err := New(cfg, zerolog.Nop(), nil); err == nil {
		t.Error("New accepted an invalid config")
	}
	cfg = Default()
	cfg.PodMapPath = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := New(cfg, zerolog.Nop(), nil); err == nil || !strings.Contains(err.Error(), "reading pod map") {
		t.Errorf("New with a missing pod map: error = %v", err)
	}
}
