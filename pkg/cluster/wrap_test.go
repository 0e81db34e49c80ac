package cluster

import "net/http"

// headerWrapper sets a header on every request, as a client certificate
// would authenticate: invisible to KubeconfigToken's capture.
func headerWrapper(k, v string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if _, ok := rt.(*captureAuth); ok {
				return rt.RoundTrip(r) // the capture sees no bearer token
			}
			r = r.Clone(r.Context())
			r.Header.Set(k, v)
			return rt.RoundTrip(r)
		})
	}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
