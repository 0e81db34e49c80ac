package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/authn"
)

// refuse answers every request with one error.
type refuse struct{ err error }

func (r refuse) Authenticate(*http.Request) (string, error) { return "", r.err }

// TestAnyAuth: the token file and the Kubernetes review are alternatives,
// but a Kubernetes "forbidden" is final.
func TestAnyAuth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("file-token-00001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := authn.Open(path, authn.Default(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tf := NewTokenAuth(f)
	req := func(tok string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return r
	}
	tests := []struct {
		name string
		auth AnyAuth
		tok  string
		want error // nil: accepted, unless outage
		// outage: the review's own error must surface, not "unauthenticated".
		outage bool
	}{
		{"file token, kube says unauthenticated", AnyAuth{refuse{ErrUnauthenticated}, tf}, "file-token-00001", nil, false},
		{"no token at all", AnyAuth{tf, refuse{ErrUnauthenticated}}, "", ErrUnauthenticated, false},
		{"kube forbids: final", AnyAuth{refuse{ErrForbidden}, tf}, "file-token-00001", ErrForbidden, false},
		{"kube unreachable, bad token: the outage is reported", AnyAuth{tf, refuse{errors.New("dial tcp: refused")}}, "nope", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.auth.Authenticate(req(tt.tok))
			switch {
			case tt.outage:
				if err == nil || errors.Is(err, ErrUnauthenticated) {
					t.Errorf("err = %v, want the review's own error", err)
				}
			case tt.want == nil && err != nil:
				t.Errorf("err = %v, want accepted", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}
