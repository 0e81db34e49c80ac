package store

import (
	"context"
	"slices"
	"testing"
	"time"
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
	s3.ImpersonatedUser = &UserInfo{Username: "alice", Groups: []string{"admins"}}
	s3.Namespace, s3.Pod, s3.Container, s3.Command = "kube-system", "dns-0", "dns", []string{"cat", "/etc/passwd"}
	s4 := session("s4", "alice", 24*60)
	s4.Namespace = "prod"
	var procs []Process
	for _, ss := range []Session{s1, s2, s3, s4} {
		for i := range 2 {
			p := process(ss.AuditID+"-p"+string(rune('0'+i)), ss.AuditID, 0)
			p.Start = ss.RequestReceived.Add(time.Duration(i+1) * time.Second)
			p.Namespace, p.Pod, p.Container, p.Argv = ss.Namespace, ss.Pod, ss.Container, ss.Command
			if i == 1 {
				p.Attribution = AttributionInherited
			}
			procs = append(procs, p)
		}
	}
	heur := process("h-p0", "", 0)
	heur.Start, heur.Attribution, heur.Argv = base.Add(time.Hour), AttributionHeuristic, []string{"nohup", "sleep"}
	procs = append(procs, heur)
	mustUpsert(t, s, []Session{s1, s2, s3, s4}, procs)
	return s
}

func TestListSessionsFilters(t *testing.T) {
	s := filterFixture(t)
	for _, tc := range []struct {
		name string
		f    SessionFilter
		want []string
	}{
		{"all, newest first", SessionFilter{}, []string{"s4", "s3", "s2", "s1"}},
		{"user, authenticated or impersonated", SessionFilter{User: "alice"}, []string{"s4", "s3", "s1"}},
		{"user bob", SessionFilter{User: "bob"}, []string{"s2"}},
		{"user none", SessionFilter{User: "mallory"}, nil},
		{"group shared", SessionFilter{Group: "system:authenticated"}, []string{"s4", "s3", "s2", "s1"}},
		{"group own", SessionFilter{Group: "team-alice"}, []string{"s4", "s1"}},
		{"group impersonated", SessionFilter{Group: "admins"}, []string{"s3"}},
		{"group and user", SessionFilter{Group: "team-carol", User: "alice"}, []string{"s3"}},
		{"group and window", SessionFilter{Group: "team-alice", Until: base.Add(time.Hour)}, []string{"s1"}},
		{"namespace", SessionFilter{Namespace: "default"}, []string{"s2", "s1"}},
		{"pod", SessionFilter{Pod: "web-0"}, []string{"s4", "s1"}},
		{"namespace and pod", SessionFilter{Namespace: "default", Pod: "web-0"}, []string{"s1"}},
		{"container", SessionFilter{Container: "sidecar"}, []string{"s2"}},
		{"since inclusive", SessionFilter{Since: base.Add(10 * time.Minute)}, []string{"s4", "s3", "s2"}},
		{"until exclusive", SessionFilter{Until: base.Add(20 * time.Minute)}, []string{"s2", "s1"}},
		{"one day", SessionFilter{Since: base, Until: base.Add(24 * time.Hour)}, []string{"s3", "s2", "s1"}},
		{"command substring", SessionFilter{Command: "passwd"}, []string{"s3"}},
		{"command spans args", SessionFilter{Command: "-c echo s"}, []string{"s4", "s1"}},
		{"command is case-sensitive", SessionFilter{Command: "BASH"}, nil},
		{"command with LIKE metacharacters", SessionFilter{Command: "%"}, nil},
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
	all := allSessions(t, s, SessionFilter{})
	if all[0].ProcessCount != 2 || !all[0].FirstProcess.Equal(all[0].RequestReceived.Add(time.Second)) ||
		!all[0].LastProcess.Equal(all[0].RequestReceived.Add(2*time.Second)) {
		t.Errorf("aggregates of %s: %d %v %v", all[0].AuditID, all[0].ProcessCount, all[0].FirstProcess, all[0].LastProcess)
	}
}

func TestListProcessesFilters(t *testing.T) {
	s := filterFixture(t)
	for _, tc := range []struct {
		name string
		f    ProcessFilter
		want []string
	}{
		{"all, newest first", ProcessFilter{}, []string{"s4-p1", "s4-p0", "h-p0", "s3-p1", "s3-p0", "s2-p1", "s2-p0", "s1-p1", "s1-p0"}},
		{"user through session", ProcessFilter{User: "alice"}, []string{"s4-p1", "s4-p0", "s3-p1", "s3-p0", "s1-p1", "s1-p0"}},
		{"group through session", ProcessFilter{Group: "admins"}, []string{"s3-p1", "s3-p0"}},
		{"namespace", ProcessFilter{Namespace: "kube-system"}, []string{"s3-p1", "s3-p0"}},
		{"pod", ProcessFilter{Pod: "web-0"}, []string{"s4-p1", "s4-p0", "h-p0", "s1-p1", "s1-p0"}},
		{"container", ProcessFilter{Container: "sidecar"}, []string{"s2-p1", "s2-p0"}},
		{"audit ID", ProcessFilter{AuditID: "s2"}, []string{"s2-p1", "s2-p0"}},
		{"attribution", ProcessFilter{Attribution: AttributionInherited}, []string{"s4-p1", "s3-p1", "s2-p1", "s1-p1"}},
		{"heuristic", ProcessFilter{Attribution: AttributionHeuristic}, []string{"h-p0"}},
		{"command", ProcessFilter{Command: "nohup sl"}, []string{"h-p0"}},
		{"window", ProcessFilter{Since: base.Add(10 * time.Minute), Until: base.Add(2 * time.Hour)}, []string{"h-p0", "s3-p1", "s3-p0", "s2-p1", "s2-p0"}},
		{"combined", ProcessFilter{User: "alice", Pod: "web-0", Attribution: AttributionAuditID}, []string{"s4-p0", "s1-p0"}},
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
