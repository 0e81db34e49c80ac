package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/rest"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/authn"
)

// authenticator builds the API's authentication: the token file (tokens
// may be nil), and with --auth-kubernetes, TokenReview and
// SubjectAccessReview against the cluster the agent runs in (its service
// account, in-cluster config). The chart turns --auth-kubernetes on by
// default; its config run outside any cluster (no KUBERNETES_SERVICE_HOST:
// the demo, a laptop) serves the token file alone, with a warning. In a pod
// the kubelet always sets it, so there a broken in-cluster config fails.
func (c *Config) authenticator(tokens *authn.File, log zerolog.Logger) (api.Authenticator, error) {
	var auths api.AnyAuth
	if tokens != nil {
		auths = append(auths, api.NewTokenAuth(tokens))
	}
	if c.AuthKubernetes {
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
