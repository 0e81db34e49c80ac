package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
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
	allowed := map[string]bool{"user": true, "group": true, "namespace": true, "pod": true, "container": true,
		"command": true, "since": true, "until": true, "limit": true, "cursor": true}
	for _, e := range extra {
		allowed[e] = true
	}
	var unknown []string
	for k := range q {
		if !allowed[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return filterParams{}, fmt.Errorf("unknown query parameters: %s", strings.Join(unknown, ", "))
	}
	p := filterParams{User: q.Get("user"), Group: q.Get("group"), Namespace: q.Get("namespace"), Pod: q.Get("pod"),
		Container: q.Get("container"), Command: q.Get("command"), Cursor: q.Get("cursor")}
	var err error
	if p.Since, err = parseTime(q.Get("since"), now); err != nil {
		return p, fmt.Errorf("parsing since: %w", err)
	}
	if p.Until, err = parseTime(q.Get("until"), now); err != nil {
		return p, fmt.Errorf("parsing until: %w", err)
	}
	if !p.Since.IsZero() && !p.Until.IsZero() && p.Until.Before(p.Since) {
		return p, errors.New("until is before since")
	}
	if l := q.Get("limit"); l != "" {
		if p.Limit, err = strconv.Atoi(l); err != nil || p.Limit < 1 {
			return p, fmt.Errorf("parsing limit %q: want a positive integer", l)
		}
	}
	return p, nil
}

// parseTime accepts RFC 3339 or a duration meaning "that long ago".
func parseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither RFC 3339 nor a duration such as 24h", s)
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
	since, err := parseTime(q.Get("since"), s.cfg.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("parsing since: %w", err))
		return
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	items, next, err := s.r.ListAlerts(r.Context(), store.AlertFilter{Rule: q.Get("rule"), Severity: q.Get("severity"),
		AuditID: q.Get("auditID"), Since: since, Limit: limit, Cursor: q.Get("cursor")})
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
