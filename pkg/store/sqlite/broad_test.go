package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestBroadSessionFilter: a group every session has (system:authenticated)
// walks the processes in page order; a user with one session of sixty
// sorts that session's processes; and both ways give the same pages, in
// the same order, to the last.
func TestBroadSessionFilter(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var sessions []join.Session
	var procs []join.Process
	for i := range 60 {
		user := fmt.Sprintf("user-%d", i%12)
		if i == 7 {
			user = "alice"
		}
		ss := session(fmt.Sprintf("s%02d", i), user, i)
		sessions = append(sessions, ss)
		for j := range 5 {
			// Interleaved starts: a later session's processes are not all
			// newer than an earlier one's.
			procs = append(procs, process(fmt.Sprintf("p%02d-%d", i, j), ss.AuditID, (i*7+j*31)%97))
		}
	}
	if err := s.Upsert(ctx, sessions, procs); err != nil {
		t.Fatal(err)
	}
	// S=60, P=5, a page of 100: broad from 60*sqrt(100/300)+1 = 35 sessions.
	for _, c := range []struct {
		f     store.ProcessFilter
		broad bool
	}{
		{store.ProcessFilter{Group: "system:authenticated"}, true},
		{store.ProcessFilter{User: "alice"}, false},
		{store.ProcessFilter{Group: "team-user-1"}, false},
		{store.ProcessFilter{User: "alice", Group: "system:authenticated"}, false}, // the narrower decides
		{store.ProcessFilter{Namespace: "default"}, false},
	} {
		got, err := s.broadSessionFilter(ctx, c.f)
		if err != nil || got != c.broad {
			t.Errorf("broadSessionFilter(%+v) = %v, %v; want %v", c.f, got, err, c.broad)
		}
	}
	plan := func(f store.ProcessFilter, broad bool) string {
		q, args, err := processesListing(f, broad, commandMatch{}).query("", 100)
		if err != nil {
			t.Fatal(err)
		}
		return queryPlan(t, s, q, args)
	}
	if p := plan(store.ProcessFilter{Group: "g"}, true); !strings.HasPrefix(p, "SCAN p USING INDEX processes_start") ||
		strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("broad plan %q: want processes_start walked in page order", p)
	}
	for _, f := range []store.ProcessFilter{
		{Group: "system:authenticated", Limit: 7},
		{User: "alice", Limit: 2},
		{User: "user-3", Group: "team-user-3", Limit: 4},
		{Group: "system:authenticated", Since: base.Add(20e9), Until: base.Add(60e9), Limit: 9},
	} {
		var pages [2][]string
		for i, broad := range []bool{false, true} {
			cur := ""
			for {
				got, next, err := list(ctx, s, "processes", processesListing(f, broad, commandMatch{}), cur, f.Limit, func(sc scanner) (join.Process, cursor, error) {
					p, id, err := scanProcess(sc)
					return p, cursor{t: nanos(p.Start), id: id}, err
				})
				if err != nil {
					t.Fatal(err)
				}
				pages[i] = append(pages[i], processIDs(got)...)
				if next == "" {
					break
				}
				cur = next
			}
		}
		if len(pages[0]) == 0 || !slices.Equal(pages[0], pages[1]) {
			t.Errorf("%+v: sorted %v, walked %v", f, pages[0], pages[1])
		}
	}
}
