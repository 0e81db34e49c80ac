package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// filterParams are the parameters sessions and processes both take.
var filterParams = []string{"user", "group", "namespace", "pod", "container", "command"}

func sessionFilter(q listQuery) (store.SessionFilter, error) {
	return store.SessionFilter{User: q.Get("user"), Group: q.Get("group"), Namespace: q.Get("namespace"),
		Pod: q.Get("pod"), Container: q.Get("container"), Command: q.Get("command"),
		Since: q.Since, Until: q.Until, Limit: q.Limit, Cursor: q.Cursor}, nil
}

var processParams = append(slices.Clone(filterParams), "auditID", "attribution")

func processFilter(q listQuery) (store.ProcessFilter, error) {
	attr := vocab.Attribution(q.Get("attribution"))
	switch attr {
	case vocab.AttributionNone, vocab.AttributionAuditID, vocab.AttributionInherited, vocab.AttributionHeuristic,
		vocab.AttributionAmbiguous:
	default:
		return store.ProcessFilter{}, fmt.Errorf("unknown attribution %q", attr)
	}
	return store.ProcessFilter{User: q.Get("user"), Group: q.Get("group"), Namespace: q.Get("namespace"),
		Pod: q.Get("pod"), Container: q.Get("container"), Command: q.Get("command"), AuditID: q.Get("auditID"),
		Attribution: attr, Since: q.Since, Until: q.Until, Limit: q.Limit, Cursor: q.Cursor}, nil
}

var alertParams = []string{"rule", "severity", "auditID"}

func alertFilter(q listQuery) (store.AlertFilter, error) {
	return store.AlertFilter{Rule: q.Get("rule"), Severity: q.Get("severity"), AuditID: q.Get("auditID"),
		Since: q.Since, Until: q.Until, Limit: q.Limit, Cursor: q.Cursor}, nil
}

// SessionView is a session with its process tree.
type SessionView struct {
	store.SessionDetail
	Tree []*TreeNode `json:"tree"`
}

// TreeNode is one process and its children.
type TreeNode struct {
	join.Process
	Children []*TreeNode `json:"children,omitempty"`
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request) {
	d, err := s.r.GetSession(r.Context(), r.PathValue("auditID"))
	if err != nil {
		s.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, NewSessionView(d, s.cfg.Now()))
}

// listProcesses is the store's page as served at the server's now.
func (s *server) listProcesses(ctx context.Context, f store.ProcessFilter) ([]join.Process, string, error) {
	ps, next, err := s.r.ListProcesses(ctx, f)
	return Served(ps, s.cfg.Now()), next, err
}

// Served sets each stored process as a reader at now sees it: pending
// while its wait is to end (join.Process.ServeAt). Every answer that
// gives processes out serves them through it or NewSessionView.
func Served(ps []join.Process, now time.Time) []join.Process {
	for i := range ps {
		ps[i].ServeAt(now)
	}
	return ps
}

// NewSessionView is a stored session as served at now (Served), with its
// process tree.
func NewSessionView(d store.SessionDetail, now time.Time) SessionView {
	Served(d.Processes, now)
	Served(d.Claimants, now)
	// The backends give [] for empty lists (store.Backend's contract).
	return SessionView{SessionDetail: d, Tree: store.NonNil(BuildTree(d.Processes))}
}

// BuildTree nests processes under their parents; a process whose parent is
// not in the list is a root. Order follows the input (oldest first).
func BuildTree(ps []join.Process) []*TreeNode {
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
