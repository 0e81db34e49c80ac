package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Page is the envelope of every list response.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// listParams are the query parameters every list takes.
var listParams = []string{"since", "until", "limit", "cursor"}

// listQuery is a list request's query: the parameters every list takes,
// parsed, and the endpoint's own, as sent.
type listQuery struct {
	url.Values
	Since, Until time.Time
	Limit        int
	Cursor       string
}

// parseList checks that q holds only the shared parameters and own, and
// parses the shared ones. It is pure: now resolves relative times such as
// since=24h.
func parseList(q url.Values, now time.Time, own []string) (listQuery, error) {
	if err := checkParams(q, append(slices.Clone(listParams), own...)); err != nil {
		return listQuery{}, err
	}
	lq := listQuery{Values: q, Cursor: q.Get("cursor")}
	var err error
	if lq.Since, lq.Until, err = parseWindow(q, now); err != nil {
		return lq, err
	}
	if lq.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return lq, err
	}
	return lq, nil
}

// list serves one list endpoint: it parses the query (the shared
// parameters and own), turns it into the store's filter F with filter (an
// error there is the caller's: 400), fetches a page of T and writes it.
func list[F, T any](s *server, own []string, filter func(listQuery) (F, error),
	fetch func(context.Context, F) ([]T, string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := parseList(r.URL.Query(), s.cfg.Now(), own)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		f, err := filter(q)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		items, next, err := fetch(r.Context(), f)
		if err != nil {
			s.storeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, Page[T]{Items: items, NextCursor: next})
	}
}

// checkParams rejects query parameters not in allowed.
func checkParams(q url.Values, allowed []string) error {
	var unknown []string
	for k := range q {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("unknown query parameters: %s", strings.Join(unknown, ", "))
	}
	return nil
}

// parseWindow reads since and until; either may be absent.
func parseWindow(q url.Values, now time.Time) (since, until time.Time, err error) {
	if since, err = parseTime(q.Get("since"), now); err != nil {
		return since, until, fmt.Errorf("parsing since: %w", err)
	}
	if until, err = parseTime(q.Get("until"), now); err != nil {
		return since, until, fmt.Errorf("parsing until: %w", err)
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		return since, until, errors.New("until is before since")
	}
	return since, until, nil
}

// parseLimit reads a page size; empty means the store's default.
func parseLimit(l string) (int, error) {
	if l == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("parsing limit %q: want a positive integer", l)
	}
	return n, nil
}

// parseTime accepts RFC 3339 or a duration meaning "that long ago". The
// store keeps times as int64 Unix nanoseconds, which hold only the years
// 1678 to 2262; a bound outside them would wrap and invert the filter.
func parseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d, derr := time.ParseDuration(s)
		if derr != nil || d < 0 {
			return time.Time{}, fmt.Errorf("%q is neither RFC 3339 nor a duration such as 24h", s)
		}
		t = now.Add(-d)
	}
	lo, hi := time.Unix(0, math.MinInt64).UTC(), time.Unix(0, math.MaxInt64).UTC()
	if t.Before(lo) || t.After(hi) {
		return time.Time{}, fmt.Errorf("%q is outside the supported range %s to %s", s,
			lo.Format(time.RFC3339), hi.Format(time.RFC3339))
	}
	return t, nil
}
