package api

import (
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

	"github.com/execid/correlator/pkg/store"
)

// filterParams are the query parameters shared by sessions and processes.
type filterParams struct {
	User, Group, Namespace, Pod, Container, Command string
	Since, Until                                    time.Time
	Limit                                           int
	Cursor                                          string
}

// parseFilter reads and validates the shared filters. It is pure: now
// resolves relative times such as since=24h.
func parseFilter(q url.Values, now time.Time, extra ...string) (filterParams, error) {
	allowed := append([]string{"user", "group", "namespace", "pod", "container", "command", "since", "until", "limit",
		"cursor"}, extra...)
	if err := checkParams(q, allowed); err != nil {
		return filterParams{}, err
	}
	p := filterParams{User: q.Get("user"), Group: q.Get("group"), Namespace: q.Get("namespace"), Pod: q.Get("pod"),
		Container: q.Get("container"), Command: q.Get("command"), Cursor: q.Get("cursor")}
	var err error
	if p.Since, p.Until, err = parseWindow(q, now); err != nil {
		return p, err
	}
	if p.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return p, err
	}
	return p, nil
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

func (s *server) listSessions(w http.ResponseWriter, r *http.Request) {
	p, err := parseFilter(r.URL.Query(), s.cfg.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	items, next, err := s.r.ListSessions(r.Context(), store.SessionFilter{User: p.User, Group: p.Group,
		Namespace: p.Namespace, Pod: p.Pod, Container: p.Container, Since: p.Since, Until: p.Until,
		Command: p.Command, Limit: p.Limit, Cursor: p.Cursor})
	if err != nil {
		s.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Page[store.Session]{Items: nonNil(items), NextCursor: next})
}

func (s *server) listProcesses(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := parseFilter(q, s.cfg.Now(), "auditID", "attribution")
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	attr := q.Get("attribution")
	switch attr {
	case "", store.AttributionAuditID, store.AttributionInherited, store.AttributionHeuristic, store.AttributionAmbiguous:
	default:
		writeError(w, http.StatusBadRequest, fmt.Errorf("unknown attribution %q", attr))
		return
	}
	items, next, err := s.r.ListProcesses(r.Context(), store.ProcessFilter{User: p.User, Group: p.Group,
		Namespace: p.Namespace, Pod: p.Pod, Container: p.Container, Since: p.Since, Until: p.Until,
		Command: p.Command, AuditID: q.Get("auditID"), Attribution: attr, Limit: p.Limit, Cursor: p.Cursor})
	if err != nil {
		s.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Page[store.Process]{Items: nonNil(items), NextCursor: next})
}

func (s *server) listAlerts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkParams(q, []string{"rule", "severity", "auditID", "since", "until", "limit", "cursor"}); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	since, until, err := parseWindow(q, s.cfg.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	items, next, err := s.r.ListAlerts(r.Context(), store.AlertFilter{Rule: q.Get("rule"), Severity: q.Get("severity"),
		AuditID: q.Get("auditID"), Since: since, Until: until, Limit: limit, Cursor: q.Get("cursor")})
	if err != nil {
		s.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Page[store.Alert]{Items: nonNil(items), NextCursor: next})
}

// SessionView is a session with its process tree.
type SessionView struct {
	store.SessionDetail
	Tree []*TreeNode `json:"tree"`
}

// TreeNode is one process and its children.
type TreeNode struct {
	store.Process
	Children []*TreeNode `json:"children,omitempty"`
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request) {
	d, err := s.r.GetSession(r.Context(), r.PathValue("auditID"))
	if err != nil {
		s.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, SessionView{SessionDetail: d, Tree: BuildTree(d.Processes)})
}

// BuildTree nests processes under their parents; a process whose parent is
// not in the list is a root. Order follows the input (oldest first).
func BuildTree(ps []store.Process) []*TreeNode {
	nodes := make(map[string]*TreeNode, len(ps))
	for i := range ps {
		nodes[ps[i].ProcessID] = &TreeNode{Process: ps[i]}
	}
	var roots []*TreeNode
	for i := range ps {
		n := nodes[ps[i].ProcessID]
		if p, ok := nodes[ps[i].ParentProcessID]; ok && p != n {
			p.Children = append(p.Children, n)
			continue
		}
		roots = append(roots, n)
	}
	return roots
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
