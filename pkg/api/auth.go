package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execid/correlator/pkg/authn"
)

// Authenticator decides whether a request may read the API. It returns
// the caller's name for the access log.
type Authenticator interface {
	Authenticate(r *http.Request) (string, error)
}

// ErrUnauthenticated and ErrForbidden map to 401 and 403.
var (
	ErrUnauthenticated = errors.New("missing or invalid bearer token")
	ErrForbidden       = errors.New("not allowed to read correlator sessions")
)

// ProxyAuthHeader carries the caller's bearer token when the request
// comes through kube-apiserver's pod or service proxy, which removes
// Authorization after authenticating the caller itself (kubernetes#38775).
// It is read only when Authorization is absent, and verified the same way.
const ProxyAuthHeader = "X-Correlator-Authorization"

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		h = r.Header.Get(ProxyAuthHeader)
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	return strings.TrimSpace(tok), ok && strings.TrimSpace(tok) != ""
}

// TokenFile accepts the bearer tokens listed in a token file (see
// authn.File: one per line, # comments, reloaded when it changes).
type TokenFile struct {
	f *authn.File
}

// NewTokenAuth authenticates with a shared token source, the one the audit
// webhooks check too, so a rotation reaches every listener at once.
func NewTokenAuth(f *authn.File) *TokenFile { return &TokenFile{f: f} }

// Authenticate compares hashes in constant time; tokens are never logged.
// A token file the policy refuses (emptied, made unsafe) refuses everyone.
func (t *TokenFile) Authenticate(r *http.Request) (string, error) {
	tok, ok := bearer(r)
	if !ok {
		return "", ErrUnauthenticated
	}
	if t.f.Accepts(tok) {
		return "token-file", nil
	}
	if err := t.f.Err(); err != nil {
		return "", err
	}
	return "", ErrUnauthenticated
}

// KubeReview authenticates the bearer token with a TokenReview and
// authorizes it with a SubjectAccessReview against kube-apiserver: the
// caller must be allowed to `get` `pods/exec`-level data, expressed as the
// resource ReadAccess (grant it with a ClusterRole; see ReadAccess for why
// not a URL).
type KubeReview struct {
	Server string // https://host:port
	Client *http.Client
	// Token authenticates correlator itself (its service account); empty
	// when Client adds its own credentials.
	Token string
	// Access is what the caller must be allowed; zero means ReadAccess.
	Access authzv1.ResourceAttributes
	// CacheTTL keeps decisions briefly so each request is not two calls.
	CacheTTL time.Duration
	// Audiences are asked for when the token does not authenticate for
	// kube-apiserver's own audience: the short-lived tokens `kubectl
	// correlator` mints for the correlator-reader service account carry
	// the audience "correlator" (TokenAudience). Empty: the default only.
	Audiences []string

	mu    sync.Mutex
	cache map[[32]byte]review
}

// ReadAccess is what reading the API takes in kube-apiserver's RBAC: get
// on sessions in the correlator.execid.io group. A resource, not a
// non-resource URL: the built-in system:discovery role lets every
// authenticated user get /apis/*, so a URL there would let anyone in.
func ReadAccess() authzv1.ResourceAttributes {
	return authzv1.ResourceAttributes{Group: "correlator.execid.io", Resource: "sessions", Verb: "get"}
}

func (k *KubeReview) access() authzv1.ResourceAttributes {
	if k.Access == (authzv1.ResourceAttributes{}) {
		return ReadAccess()
	}
	return k.Access
}

type review struct {
	user    string
	err     error
	expires time.Time
}

// Authenticate implements Authenticator.
func (k *KubeReview) Authenticate(r *http.Request) (string, error) {
	tok, ok := bearer(r)
	if !ok {
		return "", ErrUnauthenticated
	}
	key := sha256.Sum256([]byte(tok))
	k.mu.Lock()
	if c, ok := k.cache[key]; ok && time.Now().Before(c.expires) {
		k.mu.Unlock()
		return c.user, c.err
	}
	k.mu.Unlock()
	user, err := k.review(r.Context(), tok)
	if err != nil && !errors.Is(err, ErrUnauthenticated) && !errors.Is(err, ErrForbidden) {
		return "", err // transport trouble: do not cache
	}
	k.mu.Lock()
	if k.cache == nil || len(k.cache) > 10000 {
		k.cache = map[[32]byte]review{}
	}
	k.cache[key] = review{user: user, err: err, expires: time.Now().Add(k.CacheTTL)}
	k.mu.Unlock()
	return user, err
}

// TokenAudience is the audience of the tokens minted for correlator's API.
const TokenAudience = "correlator"

// tokenReview asks who tok belongs to, for audiences (nil: the
// apiserver's own).
func (k *KubeReview) tokenReview(ctx context.Context, tok string, audiences []string) (authnv1.TokenReviewStatus, error) {
	tr := authnv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec:     authnv1.TokenReviewSpec{Token: tok, Audiences: audiences},
	}
	if err := k.post(ctx, "/apis/authentication.k8s.io/v1/tokenreviews", &tr); err != nil {
		return tr.Status, fmt.Errorf("reviewing token: %w", err)
	}
	return tr.Status, nil
}

func (k *KubeReview) review(ctx context.Context, tok string) (string, error) {
	st, err := k.tokenReview(ctx, tok, nil)
	if err != nil {
		return "", err
	}
	if !st.Authenticated && len(k.Audiences) > 0 {
		if st, err = k.tokenReview(ctx, tok, k.Audiences); err != nil {
			return "", err
		}
	}
	if !st.Authenticated {
		return "", ErrUnauthenticated
	}
	u := st.User
	sar := authzv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups,
			ResourceAttributes: new(k.access()),
		},
	}
	if len(u.Extra) > 0 {
		sar.Spec.Extra = map[string]authzv1.ExtraValue{}
		for key, v := range u.Extra {
			sar.Spec.Extra[key] = authzv1.ExtraValue(v)
		}
	}
	if err := k.post(ctx, "/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar); err != nil {
		return "", fmt.Errorf("reviewing access of %s: %w", u.Username, err)
	}
	if !sar.Status.Allowed {
		return u.Username, ErrForbidden
	}
	return u.Username, nil
}

func (k *KubeReview) post(ctx context.Context, path string, obj any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(k.Server, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if k.Token != "" {
		req.Header.Set("Authorization", "Bearer "+k.Token)
	}
	resp, err := k.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("kube-apiserver answered %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(obj)
}

// IsLoopback reports whether addr (host:port) listens only on loopback,
// the one place --insecure-no-auth is allowed (authn.IsLoopback).
func IsLoopback(addr string) bool { return authn.IsLoopback(addr) }
