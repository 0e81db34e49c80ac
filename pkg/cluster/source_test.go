package cluster

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

func TestIncomplete(t *testing.T) {
	a := Answer[Session]{Nodes: 3}
	if err := a.Incomplete(); err != nil {
		t.Errorf("complete answer: %v", err)
	}
	a.fail(Failure{Node: "node-b", Error: "down"})
	err := a.Incomplete()
	if !errors.Is(err, ErrPartial) || errors.Is(err, ErrNoAnswer) || err.Error() != "partial answer" {
		t.Errorf("one of three failed: %v", err)
	}
	a.Nodes = 1
	err = a.Incomplete()
	var inc *Incomplete
	if !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrPartial) || err.Error() != "no node answered" ||
		!errors.As(err, &inc) || !inc.None() || inc.Unreachable[0].Node != "node-b" {
		t.Errorf("every node failed: %v", err)
	}
}

// TestAsker: listings narrowed by a selector ask only its pods and say
// what they left unasked; a store cannot select.
func TestAsker(t *testing.T) {
	d := cluster3(t)
	d.addPod("dev", "api-0", "node-a", "app=web")
	d.addPod("dev", "api-9", "", "app=web") // not scheduled
	var notes []string
	ask := NewAsker(newClient(t, d, nil, nil), func(s string) { notes = append(notes, s) })

	ans, err := ask.Sessions(t.Context(), Query{Filters: url.Values{}, Limit: 100, Selector: "app=nope"})
	if err != nil || len(ans.Items) != 0 || !slices.Equal(notes, []string{`no pods in any namespace match "app=nope"`}) {
		t.Errorf("app=nope: %v, items %v, notes %q", err, sessionNodes(ans.Items), notes)
	}
	notes = nil
	ans, err = ask.Sessions(t.Context(), Query{Filters: url.Values{}, Limit: 100, Selector: "track=stable", Namespace: "prod"})
	if got := sessionNodes(ans.Items); err != nil || !slices.Equal(got, []string{"replayed@node-a", "a2@node-a", "a1@node-a"}) || notes != nil {
		t.Errorf("track=stable in prod: %v, got %v, notes %q", err, got, notes)
	}
	ans, err = ask.Sessions(t.Context(), Query{Filters: url.Values{"user": {"bob"}}, Limit: 100})
	if got := sessionNodes(ans.Items); err != nil || !slices.Equal(got, []string{"a2@node-a"}) {
		t.Errorf("every node, user bob: %v, got %v", err, got)
	}

	who, err := ask.WhoIn(t.Context(), "", Query{Filters: url.Values{}, Limit: 100, Selector: "app=web", Namespace: "dev"}, false)
	if got := sessionNodes(who.Items); err != nil || !slices.Equal(got, []string{"a3@node-a"}) ||
		!slices.Equal(notes, []string{"pod dev/api-9 is on no node: skipped"}) {
		t.Errorf("who -l app=web -n dev: %v, got %v, notes %q", err, got, notes)
	}
	w, err := ask.Who(t.Context(), "web-0", "", Query{Filters: url.Values{}, Limit: 100, Namespace: "prod"}, true)
	if err != nil || w.Node != "node-a" || len(w.Items) != 3 {
		t.Errorf("who web-0: %v, node %q, %d sessions", err, w.Node, len(w.Items))
	}

	al, err := ask.Alerts(t.Context(), Query{Filters: url.Values{}, Limit: 100})
	if got := ids(al.Items, func(a Alert) string { return a.ID }); err != nil || !slices.Equal(got, []string{"x2", "x1"}) {
		t.Errorf("alerts: %v, got %v", err, got)
	}
	if _, err := ask.Alerts(t.Context(), Query{Limit: 100, Selector: "app=web"}); err != nil {
		t.Errorf("alerts -l app=web: %v", err)
	}

	// Missing: a partial answer may hold the session on a node that did
	// not answer; a complete one does not hold it.
	notes = nil
	sv, err := ask.Session(t.Context(), "nowhere")
	if err != nil {
		t.Fatal(err)
	}
	if err := ask.Missing(sv, "nowhere"); !errors.Is(err, ErrPartial) ||
		!slices.Equal(notes, []string{"session nowhere: not on any node that answered"}) {
		t.Errorf("nowhere, partial: %v, notes %q", err, notes)
	}
	if err := ask.Missing(Answer[SessionView]{Nodes: 2}, "nowhere"); err == nil ||
		err.Error() != "finding session nowhere: not on any of 2 nodes" {
		t.Errorf("nowhere, complete: %v", err)
	}
	if sv, _ := ask.Session(t.Context(), "a1"); ask.Missing(sv, "a1") != nil {
		t.Error("a1 is held, yet missing")
	}

	es := NewAsker(NewESSource(&nodeStore{pageCap: 2}, time.Now), func(s string) { t.Errorf("note %q", s) })
	q := Query{Selector: "app=web"}
	if _, err := es.Sessions(t.Context(), q); !errors.Is(err, ErrSelectorES) {
		t.Errorf("sessions -l with Elasticsearch: %v", err)
	}
	if _, err := es.WhoIn(t.Context(), "", q, false); !errors.Is(err, ErrSelectorES) {
		t.Errorf("who -l with Elasticsearch: %v", err)
	}
	if _, err := es.Alerts(t.Context(), q); !errors.Is(err, ErrSelectorES) {
		t.Errorf("alerts -l with Elasticsearch: %v", err)
	}
}

// TestESSource: one store answers for the cluster, without node names;
// pages are followed up to the limit.
func TestESSource(t *testing.T) {
	now := t0.Add(time.Hour)
	st := &nodeStore{pageCap: 2, sessions: []join.Session{
		sess("a1", "prod", "web-0", "alice", 1), sess("a2", "prod", "web-0", "bob", 3), sess("a3", "dev", "api-0", "alice", 7),
	}, procs: []join.Process{proc("a1", 1), proc("a1", 2), proc("a2", 3)},
		alerts: []store.Alert{{ID: "x1", Time: t0, Rule: "shell"}}}
	es := NewESSource(st, func() time.Time { return now })

	ans, err := es.Sessions(t.Context(), url.Values{}, 2)
	if got := sessionNodes(ans.Items); err != nil || !slices.Equal(got, []string{"a3@", "a2@"}) || !ans.Truncated ||
		ans.Items[0].Nodes == nil {
		t.Errorf("limit 2: %v, got %v, truncated %v", err, got, ans.Truncated)
	}
	ans, err = es.Sessions(t.Context(), url.Values{"user": {"alice"}}, 0)
	if got := sessionNodes(ans.Items); err != nil || !slices.Equal(got, []string{"a3@", "a1@"}) || ans.Truncated {
		t.Errorf("alice: %v, got %v, truncated %v", err, got, ans.Truncated)
	}
	who, err := es.Who(t.Context(), "prod", "web-0", "", url.Values{}, 100, true)
	if err != nil || who.Namespace != "prod" || who.Pod != "web-0" || len(who.Items) != 2 ||
		len(who.Items[1].Processes) != 2 || len(who.Items[0].Processes) != 1 {
		t.Errorf("who web-0: %v, %+v", err, who)
	}
	sv, err := es.Session(t.Context(), "a1")
	if err != nil || len(sv.Items) != 1 || len(sv.Items[0].Tree) != 2 || sv.Items[0].Nodes == nil {
		t.Errorf("session a1: %v, %+v", err, sv)
	}
	if sv, err := es.Session(t.Context(), "nowhere"); err != nil || len(sv.Items) != 0 {
		t.Errorf("session nowhere: %v, %+v", err, sv)
	}
	al, err := es.Alerts(t.Context(), url.Values{}, 10)
	if err != nil || len(al.Items) != 1 || al.Items[0].ID != "x1" {
		t.Errorf("alerts: %v, %+v", err, al)
	}

	since, until, err := es.window(url.Values{"since": {"2h"}, "until": {"2026-03-01T12:30:00Z"}})
	if err != nil || !since.Equal(now.Add(-2*time.Hour)) || !until.Equal(t0.Add(30*time.Minute)) {
		t.Errorf("window: %v to %v, %v", since, until, err)
	}
	for _, bad := range []string{"-1h", "yesterday"} {
		if _, err := es.Sessions(t.Context(), url.Values{"since": {bad}}, 10); err == nil ||
			!strings.Contains(err.Error(), "neither RFC 3339 nor a duration") {
			t.Errorf("since %q: %v", bad, err)
		}
	}
}

// TestCheckSelector: a bad selector and one beside Elasticsearch are
// refused before anything is asked; no selector is fine either way.
func TestCheckSelector(t *testing.T) {
	for _, c := range []struct {
		sel     string
		es, bad bool
	}{
		{"", false, false}, {"", true, false}, {"app=web", false, false},
		{"app=web", true, true}, {"app in (", false, true},
	} {
		err := CheckSelector(c.sel, c.es)
		if (err != nil) != c.bad || (c.es && c.bad && !errors.Is(err, ErrSelectorES)) {
			t.Errorf("CheckSelector(%q, es=%v) = %v, want refused: %v", c.sel, c.es, err, c.bad)
		}
	}
}

// TestQueryFilter sets only the values given.
func TestQueryFilter(t *testing.T) {
	q := Query{Filters: url.Values{"since": {"1h"}}}.Filter(map[string]string{"user": "alice", "pod": ""})
	if got := q.Filters.Encode(); got != "since=1h&user=alice" {
		t.Errorf("filters %q", got)
	}
}
