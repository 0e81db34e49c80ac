package api

import (
	"errors"
	"net/http"
)

// AnyAuth accepts a request that any of its authenticators accepts; a
// forbidden answer stops the search, so a valid but unauthorised
// Kubernetes token is refused, not retried against the token file.
type AnyAuth []Authenticator

// Authenticate returns the first authenticator's user that accepts r.
func (a AnyAuth) Authenticate(r *http.Request) (string, error) {
	err := ErrUnauthenticated
	for _, au := range a {
		user, e := au.Authenticate(r)
		if e == nil {
			return user, nil
		}
		if errors.Is(e, ErrForbidden) {
			return "", e
		}
		if !errors.Is(e, ErrUnauthenticated) {
			err = e
		}
	}
	return "", err
}
