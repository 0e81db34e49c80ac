package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/execid/correlator/pkg/api"
)

// AuthMode picks the credential sent to the agents.
type AuthMode string

const (
	// AuthAuto uses the kubeconfig's bearer token, and mints a
	// service account token when there is none (client certificates) or
	// the caller impersonates someone.
	AuthAuto AuthMode = "auto"
	// AuthKubeconfig sends the kubeconfig's bearer token (static, token
	// file, exec plugin or auth provider): the agent authorizes the caller.
	AuthKubeconfig AuthMode = "kubeconfig"
	// AuthServiceAccount mints a short-lived token for the reader service
	// account with the TokenRequest API (audience "correlator"): the
	// caller needs create on serviceaccounts/token for it.
	AuthServiceAccount AuthMode = "serviceaccount"
)

// ErrNoBearerToken is returned when the kubeconfig authenticates without
// a bearer token (a client certificate).
var ErrNoBearerToken = errors.New("the kubeconfig has no bearer token")

// Auth says how to authenticate to the agents.
type Auth struct {
	Mode AuthMode
	// ServiceAccount (in the agent namespace) and TTL are for minted tokens.
	ServiceAccount string
	TTL            time.Duration
}

// Authenticate picks the credential the agents get and keeps it in c. It
// returns how it got it, for debug output; the token is never returned
// or logged.
func (c *Client) Authenticate(ctx context.Context, a Auth) (string, error) {
	mode := a.Mode
	if mode == "" {
		mode = AuthAuto
	}
	if mode != AuthAuto && mode != AuthKubeconfig && mode != AuthServiceAccount {
		return "", fmt.Errorf("validating auth mode %q: want auto, kubeconfig or serviceaccount", mode)
	}
	imp := c.rest.Impersonate
	impersonating := imp.UserName != "" || imp.UID != "" || len(imp.Groups) > 0 || len(imp.Extra) > 0
	if mode == AuthKubeconfig || (mode == AuthAuto && !impersonating) {
		tok, err := KubeconfigToken(c.rest)
		switch {
		case err == nil:
			c.token = tok
			if impersonating {
				return "kubeconfig bearer token (the agents authorize the token's user, not the impersonated one)", nil
			}
			return "kubeconfig bearer token", nil
		case mode == AuthKubeconfig || !errors.Is(err, ErrNoBearerToken):
			return "", err
		}
	}
	sa := a.ServiceAccount
	if sa == "" {
		sa = DefaultReaderSA
	}
	tok, ttl, err := c.mintToken(ctx, sa, a.TTL)
	if err != nil {
		return "", err
	}
	c.token = tok
	why := "the kubeconfig has no bearer token"
	if impersonating {
		why = "impersonating"
	}
	if mode == AuthServiceAccount {
		why = "asked for"
	}
	return fmt.Sprintf("token minted for serviceaccount %s/%s (audience %s, expires in %s; %s)",
		c.cfg.AgentNamespace, sa, api.TokenAudience, ttl, why), nil
}

// KubeconfigToken is the bearer token client-go would send with cfg:
// cfg's auth wrappers (static token, token file, exec credential plugin,
// auth provider) run on a request that never leaves this process.
func KubeconfigToken(cfg *rest.Config) (string, error) {
	capture := &captureAuth{}
	rt, err := rest.HTTPWrappersForConfig(cfg, capture)
	if err != nil {
		return "", fmt.Errorf("reading kubeconfig credentials: %w", err)
	}
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimRight(host, "/")+"/version", nil)
	if err != nil {
		return "", fmt.Errorf("reading kubeconfig credentials: %w", err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", fmt.Errorf("reading kubeconfig credentials: %w", err)
	}
	resp.Body.Close()
	tok, ok := strings.CutPrefix(capture.header, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return "", ErrNoBearerToken
	}
	return strings.TrimSpace(tok), nil
}

// captureAuth records the Authorization header and answers without
// sending anything.
type captureAuth struct{ header string }

func (c *captureAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	c.header = r.Header.Get("Authorization")
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
}

// mintToken asks the TokenRequest API for a token of sa with the
// audience "correlator".
func (c *Client) mintToken(ctx context.Context, sa string, ttl time.Duration) (string, time.Duration, error) {
	ttl = max(ttl, minTokenTTL)
	secs := int64(ttl / time.Second)
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{api.TokenAudience}, ExpirationSeconds: &secs}}
	out, err := c.core.ServiceAccounts(c.cfg.AgentNamespace).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	if err != nil {
		return "", 0, fmt.Errorf("minting a token for serviceaccount %s/%s (needs create on serviceaccounts/token): %w",
			c.cfg.AgentNamespace, sa, err)
	}
	if out.Status.Token == "" {
		return "", 0, fmt.Errorf("minting a token for serviceaccount %s/%s: empty token", c.cfg.AgentNamespace, sa)
	}
	if !out.Status.ExpirationTimestamp.IsZero() {
		ttl = time.Until(out.Status.ExpirationTimestamp.Time).Round(time.Second)
	}
	return out.Status.Token, ttl, nil
}
