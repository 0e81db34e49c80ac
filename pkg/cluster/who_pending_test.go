package cluster

import (
	"net/url"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
)

// TestWhoPending: in the minute before an ID-less exec root's record
// comes, it has no session; who asks the pod's agent for its newest
// processes too and answers the pending ones, so the answer is "not known
// yet", never "nobody". Control: a deadline passed is not pending.
func TestWhoPending(t *testing.T) {
	for _, tc := range []struct {
		name    string
		until   time.Time
		pending bool
	}{{"waiting", time.Now().Add(time.Hour), true}, {"wait over", time.Now().Add(-time.Minute), false}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newAPIServerDouble(t)
			d.nodes = []string{"node-a"}
			root := join.Process{Namespace: "prod", Pod: "web-0", Container: "app", Flags: []string{},
				Start: time.Now().Add(-10 * time.Second), PendingUntil: tc.until}
			root.PID, root.ProcessID, root.Argv = 40, "40-1", []string{"sh"}
			d.addAgent("node-a", &nodeStore{pageCap: 100, sessions: []join.Session{sess("a1", "prod", "web-0", "alice", 1)},
				procs: []join.Process{proc("a1", 1), root}}, "", "HTTP")
			d.addPod("prod", "web-0", "node-a")
			ans, err := newClient(t, d, nil, nil).Who(t.Context(), "prod", "web-0", "", url.Values{}, 100, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(ans.Items) != 1 || ans.Partial {
				t.Fatalf("sessions %+v partial %v", ans.Items, ans.Partial)
			}
			got := ids(ans.Pending, func(p join.Process) string { return p.ProcessID })
			if tc.pending != (len(got) == 1 && got[0] == "40-1") || !tc.pending && len(got) != 0 {
				t.Fatalf("pending %v, want the root: %v", got, tc.pending)
			}
			if tc.pending && !ans.Pending[0].PendingUntil.Equal(tc.until) {
				t.Errorf("pending until %v, want %v", ans.Pending[0].PendingUntil, tc.until)
			}
		})
	}
}
