package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/execid/correlator/pkg/authn"
	"github.com/execid/correlator/pkg/join"
)

// Client queries a correlator API server; the CLI uses it.
type Client struct {
	BaseURL string // https://node:8443
	Token   string
	HTTP    *http.Client
}

// ClientConfig is how the CLI reaches an API server: its URL, the file
// of its bearer token, and the CAs of its certificate.
type ClientConfig struct {
	Server, TokenFile, CAFile string
	// InsecureSkipVerify is the CLI's explicit, documented flag.
	InsecureSkipVerify bool
}

// NewClient is a Client for cfg, its token read and its CAs loaded.
func NewClient(cfg ClientConfig) (*Client, error) {
	c := &Client{BaseURL: cfg.Server, HTTP: &http.Client{}}
	if cfg.TokenFile != "" {
		tok, err := authn.FirstToken(cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		c.Token = tok
	}
	tc := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // an explicit, documented flag
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading CA file %s: no certificates in it", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	c.HTTP.Transport = &http.Transport{TLSClientConfig: tc}
	return c, nil
}

// SessionPage and ProcessPage are list responses.
type (
	SessionPage = Page[join.Session]
	ProcessPage = Page[join.Process]
)

// Sessions lists sessions with the given filters (user, pod, since, …).
func (c *Client) Sessions(ctx context.Context, q url.Values) (SessionPage, error) {
	var p SessionPage
	return p, c.get(ctx, "/api/v1/sessions", q, &p)
}

// Processes lists processes with the given filters.
func (c *Client) Processes(ctx context.Context, q url.Values) (ProcessPage, error) {
	var p ProcessPage
	return p, c.get(ctx, "/api/v1/processes", q, &p)
}

// Session fetches one session and its process tree.
func (c *Client) Session(ctx context.Context, auditID string) (SessionView, error) {
	var v SessionView
	return v, c.get(ctx, "/api/v1/sessions/"+url.PathEscape(auditID), nil, &v)
}

// Collect fetches one page, or with all every page, following cursors
// (fetch is a Client list: Sessions, Processes).
func Collect[T any](ctx context.Context, q url.Values, all bool,
	fetch func(context.Context, url.Values) (Page[T], error)) (Page[T], error) {
	var out Page[T]
	for {
		p, err := fetch(ctx, q)
		if err != nil {
			return out, err
		}
		out.Items = append(out.Items, p.Items...)
		out.NextCursor = p.NextCursor
		if !all || p.NextCursor == "" {
			return out, nil
		}
		q.Set("cursor", p.NextCursor)
	}
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	u := strings.TrimRight(c.BaseURL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("querying %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("querying %s: %s: %s", path, resp.Status, e.Error)
		}
		return fmt.Errorf("querying %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}
