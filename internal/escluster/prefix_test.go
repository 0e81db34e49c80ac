package escluster

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestDropPrefix: what is under a test's prefix (indices, an index
// template) is gone after DropPrefix, and what is beside it stays.
func TestDropPrefix(t *testing.T) {
	c := Shared(t)
	ctx := context.Background()
	p := Prefix(t, c)
	beside := Prefix(t, c)
	put := func(path, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if c.apiKey != "" {
			req.Header.Set("Authorization", "ApiKey "+c.apiKey)
		}
		res, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode > 299 {
			t.Fatalf("PUT %s: %s", path, res.Status)
		}
	}
	put("/_index_template/"+p+"-t", `{"index_patterns":["`+p+`-t-*"],"priority":200}`)
	for _, ix := range []string{p + "-a", p + "-t-1", beside + "-a"} {
		put("/"+ix+"/_doc/1?refresh=wait_for", `{"n":1}`)
	}
	if n, err := c.Count(ctx, p+"-*"); err != nil || n != 2 {
		t.Fatalf("Count(%s-*) = %d, %v; want 2", p, n, err)
	}
	if err := c.DropPrefix(ctx, p); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Count(ctx, p+"-*"); err != nil || n != 0 {
		t.Fatalf("after DropPrefix: Count(%s-*) = %d, %v; want 0", p, n, err)
	}
	if _, err := c.send(ctx, http.MethodGet, "/_index_template/"+p+"-t"); err != errNotFound {
		t.Fatalf("index template %s-t after DropPrefix: %v, want not found", p, err)
	}
	if n, err := c.Count(ctx, beside+"-*"); err != nil || n != 1 {
		t.Fatalf("Count(%s-*) beside = %d, %v; want 1", beside, n, err)
	}
	if err := c.DropPrefix(ctx, p); err != nil {
		t.Fatalf("dropping an empty prefix: %v", err)
	}
}
