package elasticsearch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

// layoutDocID is the meta document recording the index period of a
// prefix: every agent must place a process in the same index, so the
// first store to open a prefix decides and the rest follow.
const layoutDocID = "layout"

type layoutDoc struct {
	PeriodSeconds int64 `json:"period_seconds"`
}

// layout returns the prefix's recorded index period, recording want when
// none is.
func (c *conn) layout(ctx context.Context, n names, want time.Duration) (time.Duration, error) {
	path := "/" + n.meta + "/_doc/" + layoutDocID
	for range 2 {
		var cur struct {
			Found  bool      `json:"found"`
			Source layoutDoc `json:"_source"`
		}
		err := c.do(ctx, http.MethodGet, path, nil, nil, &cur)
		var ae *apiError
		if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
			return 0, fmt.Errorf("reading the index layout: %w", err)
		}
		if cur.Found {
			p := time.Duration(cur.Source.PeriodSeconds) * time.Second
			if err := validPeriod(p); err != nil {
				return 0, fmt.Errorf("reading the index layout of %s: %w", n.prefix, err)
			}
			return p, nil
		}
		err = c.do(ctx, http.MethodPut, path, url.Values{"op_type": {"create"}},
			layoutDoc{PeriodSeconds: int64(want / time.Second)}, nil)
		if err == nil {
			return want, nil
		}
		if !(errors.As(err, &ae) && ae.Status == http.StatusConflict) {
			return 0, fmt.Errorf("recording the index layout: %w", err)
		}
		// Another store recorded one first: read it.
	}
	return 0, errors.New("recording the index layout: it changed twice while being read")
}

// version reads the cluster's version. GET / is the usual way, but
// Elastic's test distribution has no handler there (405), so the local
// node's info answers instead.
func (c *conn) version(ctx context.Context) (string, error) {
	var info struct {
		Version struct {
			Number string `json:"number"`
		} `json:"version"`
	}
	err := c.do(ctx, http.MethodGet, "/", nil, nil, &info)
	var ae *apiError
	if err == nil || !errors.As(err, &ae) || (ae.Status != http.StatusMethodNotAllowed && ae.Status != http.StatusNotFound) {
		return info.Version.Number, err
	}
	var nodes struct {
		Nodes map[string]struct {
			Version string `json:"version"`
		} `json:"nodes"`
	}
	if err := c.do(ctx, http.MethodGet, "/_nodes/_local", url.Values{"filter_path": {"nodes.*.version"}}, nil, &nodes); err != nil {
		return "", err
	}
	for _, nd := range nodes.Nodes {
		return nd.Version, nil
	}
	return "", nil
}

// holderName is the retention lease's name for this process.
func holderName(given string) string {
	if given != "" {
		return given
	}
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "/" + hex.EncodeToString(b[:])
}
