package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/rest"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/authn"
)

// anyAuth accepts a request that any of its authenticators accepts; a
// forbidden answer stops the search, so a valid but unauthorised
// Kubernetes token is refused, not retried against the token file.
type anyAuth []api.Authenticator

func (a anyAuth) Authenticate(r *http.Request) (string, error) {
	err := api.ErrUnauthenticated
	for _, au := range a {
		user, e := au.Authenticate(r)
		if e == nil {
			return user, nil
		}
		if errors.Is(e, api.ErrForbidden) {
			return "", e
		}
		if !errors.Is(e, api.ErrUnauthenticated) {
			err = e
		}
	}
	return "", err
}

// tokenFiles opens each token file once under the agent's policy
// (authn.Default: 16 characters at least, not group- or world-writable,
// reloaded when rotated), so the API and the audit webhooks that name the
// same file share one source and see a rotation together.
type tokenFiles struct {
	log   zerolog.Logger
	files map[string]*authn.File
}

func newTokenFiles(log zerolog.Logger) *tokenFiles {
	return &tokenFiles{log: log, files: map[string]*authn.File{}}
}

// open returns the shared source for path.
func (t *tokenFiles) open(path string) (*authn.File, error) {
	if f, ok := t.files[path]; ok {
		return f, nil
	}
	f, err := authn.Open(path, authn.Default(), t.log)
	if err != nil {
		return nil, err
	}
	t.files[path] = f
	return f, nil
}

// authenticator builds the API's authentication: the token file (tokens
// may be nil), and with --auth-kubernetes, TokenReview and
// SubjectAccessReview against the cluster the agent runs in (its service
// account, in-cluster config). The chart turns --auth-kubernetes on by
// default; its config run outside any cluster (no KUBERNETES_SERVICE_HOST:
// the demo, a laptop) serves the token file alone, with a warning. In a pod
// the kubelet always sets it, so there a broken in-cluster config fails.
func (o *runOptions) authenticator(tokens *authn.File, log zerolog.Logger) (api.Authenticator, error) {
	var auths anyAuth
	if tokens != nil {
		auths = append(auths, api.NewTokenAuth(tokens))
	}
	if o.authKubernetes {
		cfg, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) && tokens != nil {
			log.Warn().Str("component", "auth").Err(err).
				Msg("not in a cluster: --auth-kubernetes ignored, Kubernetes tokens are refused, the token file alone authenticates")
			return auths[0], nil
		}
		if err != nil {
			return nil, fmt.Errorf("configuring --auth-kubernetes: %w", err)
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("configuring --auth-kubernetes: %w", err)
		}
		// The client adds the service account's (rotated) token itself.
		// Tokens minted for correlator-reader (kubectl correlator) carry
		// the audience "correlator".
		auths = append(auths, &api.KubeReview{Server: cfg.Host, Client: client,
			CacheTTL: 30 * time.Second, Audiences: []string{api.TokenAudience}})
	}
	if len(auths) == 1 {
		return auths[0], nil
	}
	return auths, nil
}
