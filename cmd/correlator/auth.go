package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/rest"

	"github.com/execid/correlator/pkg/api"
)

// kubeReviewPath is the non-resource URL a caller needs `get` on when the
// API authenticates through Kubernetes (the chart's correlator-reader role).
const kubeReviewPath = "/apis/correlator/v1"

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

// authenticator builds the API's authentication: the token file, and with
// --auth-kubernetes, TokenReview and SubjectAccessReview against the
// cluster the agent runs in (its service account, in-cluster config).
func (o *runOptions) authenticator() (api.Authenticator, error) {
	var auths anyAuth
	if o.tokenFile != "" {
		tf, err := api.NewTokenFile(o.tokenFile)
		if err != nil {
			return nil, err
		}
		auths = append(auths, tf)
	}
	if o.authKubernetes {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("configuring --auth-kubernetes: %w", err)
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("configuring --auth-kubernetes: %w", err)
		}
		// The client adds the service account's (rotated) token itself.
		auths = append(auths, &api.KubeReview{Server: cfg.Host, Client: client, Path: kubeReviewPath, CacheTTL: 30 * time.Second})
	}
	if len(auths) == 1 {
		return auths[0], nil
	}
	return auths, nil
}
