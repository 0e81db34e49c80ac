package escluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Prefix returns an index prefix of t's own on c (ct-<nanoseconds>-<random>)
// and drops everything under it when t ends, so that tests sharing the
// cluster never read each other's documents.
func Prefix(t testing.TB, c *Cluster) string {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	p := fmt.Sprintf("ct-%d-%x", time.Now().UnixNano(), r)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DropPrefix(ctx, p); err != nil {
			t.Logf("escluster: dropping prefix %s: %v", p, err)
		}
	})
	return p
}

// DropPrefix deletes the indices and index templates named <prefix>-*.
// Indices go by name: the cluster refuses to delete through a wildcard
// (action.destructive_requires_name defaults to true).
func (c *Cluster) DropPrefix(ctx context.Context, prefix string) error {
	if prefix == "" || strings.ContainsAny(prefix, "*,/") {
		return fmt.Errorf("dropping prefix %q: not a plain prefix", prefix)
	}
	var rows []struct {
		Index string `json:"index"`
	}
	body, err := c.send(ctx, http.MethodGet, "/_cat/indices/"+prefix+"-*?format=json&h=index&expand_wildcards=all")
	if err != nil {
		return fmt.Errorf("listing indices %s-*: %w", prefix, err)
	}
	if err := json.Unmarshal(body, &rows); err != nil {
		return fmt.Errorf("decoding the indices of %s-*: %w", prefix, err)
	}
	var errs []error
	for _, r := range rows {
		if _, err := c.send(ctx, http.MethodDelete, "/"+r.Index); err != nil {
			errs = append(errs, fmt.Errorf("deleting index %s: %w", r.Index, err))
		}
	}
	if _, err := c.send(ctx, http.MethodDelete, "/_index_template/"+prefix+"-*"); err != nil && !errors.Is(err, errNotFound) {
		errs = append(errs, fmt.Errorf("deleting index templates %s-*: %w", prefix, err))
	}
	return errors.Join(errs...)
}

// Count is the number of documents searches see now in target (indices,
// patterns); a pattern matching nothing counts none.
func (c *Cluster) Count(ctx context.Context, target string) (int, error) {
	body, err := c.send(ctx, http.MethodGet, "/"+target+"/_count?ignore_unavailable=true&allow_no_indices=true")
	if err != nil {
		return 0, fmt.Errorf("counting the documents of %s: %w", target, err)
	}
	var res struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return 0, fmt.Errorf("decoding the count of %s: %w", target, err)
	}
	return res.Count, nil
}

var errNotFound = errors.New("404 not found")

// send makes one request of the first node that answers (those not
// killed through c first) and returns a 2xx answer's body.
func (c *Cluster) send(ctx context.Context, method, path string) ([]byte, error) {
	var errs []error
	for _, base := range c.liveFirst() {
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			return nil, err
		}
		if c.apiKey != "" {
			req.Header.Set("Authorization", "ApiKey "+c.apiKey)
		}
		resp, err := c.client.Do(req)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading the answer: %w", err)
		case resp.StatusCode == http.StatusNotFound:
			return nil, errNotFound
		case resp.StatusCode > 299:
			return nil, fmt.Errorf("answered %d: %.300s", resp.StatusCode, body)
		}
		return body, nil
	}
	return nil, errors.Join(errs...)
}
