package sqlite

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// filterFixture stores four sessions (newest last) and their processes:
//
//	s1 alice  default/web-0/app       t=0     sh -c echo s1
//	s2 bob    default/web-1/sidecar   t=10m   bash -i
//	s3 carol as alice (admins)  kube-system/dns-0/dns  t=20m  cat /etc/passwd
//	s4 alice  prod/web-0/app          t=1d    sh -c echo s4
func filterFixture(t *testing.T) *Store {
	s := openTest(t)
	s1 := session("s1", "alice", 0)
	s2 := session("s2", "bob", 10)
	s2.Pod, s2.Container, s2.Command = "web-1", "sidecar", []string{"bash", "-i"}
	s3 := session("s3", "carol", 20)
	s3.ImpersonatedUser = &auditlog.UserInfo{Username: "alice", Groups: []string{"admins"}}
	s3.Namespace, s3.Pod, s3.Container, s3.Command = "kube-system", "dns-0", "dns", []string{"cat", "/etc/passwd"}
	s4 := session("s4", "alice", 24*60)
	s4.Namespace = "prod"
	var procs []join.Process
	for _, ss := range []join.Session{s1, s2, s3, s4} {
		for i := range 2 {
			p := process(ss.AuditID+"-p"+string(rune('0'+i)), ss.AuditID, 0)
			p.Start = ss.RequestReceivedTimestamp.Add(time.Duration(i+1) * time.Second)
			p.Namespace, p.Pod, p.Container, p.Argv = ss.Namespace, ss.Pod, ss.Container, ss.Command
			if i == 1 {
				p.Attribution = vocab.AttributionInherited
			}
			procs = append(procs, p)
		}
	}
	heur := process("h-p0", "", 0)
	heur.Start, heur.Attribution, heur.Argv = base.Add(time.Hour), vocab.AttributionHeuristic, []string{"nohup", "sleep"}
	procs = append(procs, heur)
	mustUpsert(t, s, []join.Session{s1, s2, s3, s4}, procs)
	return s
}

func TestListSessionsFilters(t *testing.T) {
	s := filterFixture(t)
	for _, tc := range []struct {
		name string
		f    store.SessionFilter
		want []string
	}{
		{"all, newest first", store.SessionFilter{}, []string{"s4", "s3", "s2", "s1"}},
		{"user, authenticated or impersonated", store.SessionFilter{User: "alice"}, []string{"s4", "s3", "s1"}},
		{"user bob", store.SessionFilter{User: "bob"}, []string{"s2"}},
		{"user none", store.SessionFilter{User: "mallory"}, nil},
		{"group shared", store.SessionFilter{Group: "system:authenticated"}, []string{"s4", "s3", "s2", "s1"}},
		{"group own", store.SessionFilter{Group: "team-alice"}, []string{"s4", "s1"}},
		{"group impersonated", store.SessionFilter{Group: "admins"}, []string{"s3"}},
		{"group and user", store.SessionFilter{Group: "team-carol", User: "alice"}, []string{"s3"}},
		{"group and window", store.SessionFilter{Group: "team-alice", Until: base.Add(time.Hour)}, []string{"s1"}},
		{"namespace", store.SessionFilter{Namespace: "default"}, []string{"s2", "s1"}},
		{"pod", store.SessionFilter{Pod: "web-0"}, []string{"s4", "s1"}},
		{"namespace and pod", store.SessionFilter{Namespace: "default", Pod: "web-0"}, []string{"s1"}},
		{"container", store.SessionFilter{Container: "sidecar"}, []string{"s2"}},
		{"since inclusive", store.SessionFilter{Since: base.Add(10 * time.Minute)}, []string{"s4", "s3", "s2"}},
		{"until exclusive", store.SessionFilter{Until: base.Add(20 * time.Minute)}, []string{"s2", "s1"}},
		{"one day", store.SessionFilter{Since: base, Until: base.Add(24 * time.Hour)}, []string{"s3", "s2", "s1"}},
		{"command substring", store.SessionFilter{Command: "passwd"}, []string{"s3"}},
		{"command spans args", store.SessionFilter{Command: "-c echo s"}, []string{"s4", "s1"}},
		{"command is case-sensitive", store.SessionFilter{Command: "BASH"}, nil},
		{"command with LIKE metacharacters", store.SessionFilter{Command: "%"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []int{0, 1, 2} { // every page size gives the same rows
				f := tc.f
				f.Limit = limit
				if got := sessionIDs(allSessions(t, s, f)); !slices.Equal(got, tc.want) {
					t.Errorf("limit %d: got %v, want %v", limit, got, tc.want)
				}
			}
		})
	}
	// Aggregates come from the processes.
	all := allSessions(t, s, store.SessionFilter{})
	if all[0].ProcessCount != 2 || !all[0].FirstProcess.Equal(all[0].RequestReceivedTimestamp.Add(time.Second)) ||
		!all[0].LastProcess.Equal(all[0].RequestReceivedTimestamp.Add(2*time.Second)) {
		t.Errorf("aggregates of %s: %d %v %v", all[0].AuditID, all[0].ProcessCount, all[0].FirstProcess, all[0].LastProcess)
	}
}

func TestListProcessesFilters(t *testing.T) {
	s := filterFixture(t)
	for _, tc := range []struct {
		name string
		f    store.ProcessFilter
		want []string
	}{
		{"all, newest first", store.ProcessFilter{}, []string{"s4-p1", "s4-p0", "h-p0", "s3-p1", "s3-p0", "s2-p1", "s2-p0", "s1-p1", "s1-p0"}},
		{"user through session", store.ProcessFilter{User: "alice"}, []string{"s4-p1", "s4-p0", "s3-p1", "s3-p0", "s1-p1", "s1-p0"}},
		{"group through session", store.ProcessFilter{Group: "admins"}, []string{"s3-p1", "s3-p0"}},
		{"namespace", store.ProcessFilter{Namespace: "kube-system"}, []string{"s3-p1", "s3-p0"}},
		{"pod", store.ProcessFilter{Pod: "web-0"}, []string{"s4-p1", "s4-p0", "h-p0", "s1-p1", "s1-p0"}},
		{"container", store.ProcessFilter{Container: "sidecar"}, []string{"s2-p1", "s2-p0"}},
		{"audit ID", store.ProcessFilter{AuditID: "s2"}, []string{"s2-p1", "s2-p0"}},
		{"attribution", store.ProcessFilter{Attribution: vocab.AttributionInherited}, []string{"s4-p1", "s3-p1", "s2-p1", "s1-p1"}},
		{"heuristic", store.ProcessFilter{Attribution: vocab.AttributionHeuristic}, []string{"h-p0"}},
		{"command", store.ProcessFilter{Command: "nohup sl"}, []string{"h-p0"}},
		{"window", store.ProcessFilter{Since: base.Add(10 * time.Minute), Until: base.Add(2 * time.Hour)}, []string{"h-p0", "s3-p1", "s3-p0", "s2-p1", "s2-p0"}},
		{"combined", store.ProcessFilter{User: "alice", Pod: "web-0", Attribution: vocab.AttributionAuditID}, []string{"s4-p0", "s1-p0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []int{0, 1, 3} {
				f := tc.f
				f.Limit = limit
				var got []string
				for {
					page, next, err := s.ListProcesses(context.Background(), f)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, processIDs(page)...)
					if next == "" {
						break
					}
					f.Cursor = next
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("limit %d: got %v, want %v", limit, got, tc.want)
				}
			}
		})
	}
}
