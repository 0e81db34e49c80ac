package cluster

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/join"
)

// TestMergerBounded: merging the nodes' answers as they come, keeping
// at most limit, gives what sorting every answer at once gives, in any
// order of arrival: identical sessions (a shared store) once with all
// their nodes, ties in time and ID ordered the same way.
func TestMergerBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		nodes := 1 + rng.IntN(8)
		limit := 1 + rng.IntN(12)
		var res [][]Session
		for n := range nodes {
			var items []Session
			for range rng.IntN(10) {
				// Few minutes, IDs and pods: ties and duplicates abound.
				s := sess(fmt.Sprintf("id%d", rng.IntN(4)), "prod", fmt.Sprintf("web-%d", rng.IntN(2)), "alice", rng.IntN(5))
				items = append(items, Session{Nodes: []string{fmt.Sprintf("node-%d", n)}, Session: s})
			}
			res = append(res, items)
		}
		want, wantTrunc := mergeAll(res, limit)
		for range 3 {
			m := sessionMerger(limit)
			for _, i := range rng.Perm(len(res)) {
				m.add(slices.Clone(res[i]))
			}
			got, trunc := m.result()
			if !sameSessions(got, want) || trunc != wantTrunc {
				t.Fatalf("round %d, limit %d: got %v (truncated %v), want %v (%v)", round, limit,
					sessionKeys(got), trunc, sessionKeys(want), wantTrunc)
			}
			if len(got) > limit || len(m.byKey) != len(m.kept) {
				t.Fatalf("round %d: %d kept, %d keys, limit %d", round, len(got), len(m.byKey), limit)
			}
		}
	}
}

// mergeAll is the merge with every answer at hand: dedupe, sort, cut.
func mergeAll(res [][]Session, limit int) ([]Session, bool) {
	type k struct {
		s   Session
		key string
	}
	var all []k
	idx := map[string]int{}
	for _, items := range res {
		for _, s := range items {
			b, _ := json.Marshal(s.Session)
			if i, ok := idx[string(b)]; ok {
				all[i].s.Nodes = append(slices.Clone(all[i].s.Nodes), s.Nodes...)
				slices.Sort(all[i].s.Nodes)
				continue
			}
			idx[string(b)] = len(all)
			all = append(all, k{s, string(b)})
		}
	}
	slices.SortFunc(all, func(a, b k) int {
		return cmp.Or(b.s.RequestReceivedTimestamp.Compare(a.s.RequestReceivedTimestamp),
			cmp.Compare(a.s.AuditID, b.s.AuditID), cmp.Compare(a.key, b.key))
	})
	out := []Session{}
	for _, e := range all {
		out = append(out, e.s)
	}
	if len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

func sessionKeys(items []Session) []string {
	return ids(items, func(s Session) string {
		return fmt.Sprintf("%s/%s/%s@%v", s.RequestReceivedTimestamp.Format("15:04"), s.AuditID, s.Pod, s.Nodes)
	})
}

func sameSessions(a, b []Session) bool { return slices.Equal(sessionKeys(a), sessionKeys(b)) }

// TestNodeAnswerCapped: an agent that sends more than it was asked for
// adds at most limit items to the answer.
func TestNodeAnswerCapped(t *testing.T) {
	d := newAPIServerDouble(t)
	d.addAgent("node-a", nil, "", corev1.URISchemeHTTP)
	d.agents["correlator-node-a"] = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p := api.Page[join.Session]{NextCursor: "more"}
		for i := range 10 {
			p.Items = append(p.Items, sess(fmt.Sprintf("s%d", i), "prod", "web-0", "alice", i))
		}
		json.NewEncoder(w).Encode(p)
	})
	c := newClient(t, d, nil, nil)
	ans, err := c.Sessions(t.Context(), url.Values{}, 3)
	if err != nil || len(ans.Items) != 3 || ans.Partial {
		t.Errorf("limit 3: %d items, partial %v, %v", len(ans.Items), ans.Partial, err)
	}
	a := Agent{Node: "node-a", Namespace: DefaultAgentNamespace, Pod: "correlator-node-a", Port: "8080"}
	for _, keep := range []func(*join.Session) bool{nil, func(*join.Session) bool { return true }} {
		items, err := pagesWhere(t.Context(), c, a, "api/v1/sessions", url.Values{}, 4, keep)
		if err != nil || len(items) != 4 {
			t.Errorf("a read of 4 (filtered %v): %d items, %v", keep != nil, len(items), err)
		}
	}
}
