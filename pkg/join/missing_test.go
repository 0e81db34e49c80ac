package join

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// idless is a record as a pipeline that dropped auditID hands it on.
func idless(uri string, command ...string) auditlog.ExecRecord {
	r := xr("", command...)
	r.RequestURI = uri
	return r
}

func syntheticOf(r auditlog.ExecRecord) string {
	return auditlog.SyntheticRecordID(&r)
}

func TestJoinMissingAuditID(t *testing.T) {
	ls, sh := idless("/exec?1", "ls", "-la"), idless("/exec?2", "sh")
	keyLS, keySH := syntheticOf(ls), syntheticOf(sh)
	gke := rwith(idless("core/v1/namespaces/ns/pods/web/exec"), func(r *auditlog.ExecRecord) { r.Command, r.Container = nil, "" })
	keyGKE := syntheticOf(gke)
	cases := []joinCase{
		{
			name:  "ID-less records are heuristic candidates",
			recs:  []auditlog.ExecRecord{ls, sh},
			procs: []Process{with(pr("r", "runc", "", ""), argv("ls", "-la")), with(pr("c", "r", "", ""), argv("id"))},
			want: map[string]want{
				"r": {attr: vocab.AttributionHeuristic, auditID: keyLS, minConf: 0.8},
				"c": {attr: vocab.AttributionHeuristic, auditID: keyLS, minConf: 0.8},
			},
		},
		{
			name: "a process carrying a synthetic key is never joined by ID",
			recs: []auditlog.ExecRecord{ls},
			procs: []Process{
				with(pr("f", "runc", keyLS, vocab.SourceEnv), argv("nginx")),
				with(pr("fc", "f", keyLS, vocab.SourceInherited), argv("id")),
			},
			expire: true,
			want: map[string]want{
				"f":  {claimed: keyLS, flags: []string{vocab.FlagNoAuditRecord}},
				"fc": {claimed: keyLS, flags: []string{vocab.FlagNoAuditRecord}},
			},
		},
		{
			name:  "a record that does not say what ran matches by pod and time only",
			recs:  []auditlog.ExecRecord{gke},
			procs: []Process{with(pr("r", "runc", "", ""), argv("bash"))},
			want:  map[string]want{"r": {attr: vocab.AttributionHeuristic, auditID: keyGKE, minConf: 0.3}},
		},
		{
			name:  "an argv match outranks a record that does not say what ran",
			recs:  []auditlog.ExecRecord{gke, sh},
			procs: []Process{pr("r", "runc", "", "")},
			want:  map[string]want{"r": {attr: vocab.AttributionHeuristic, auditID: keySH, minConf: 0.8}},
		},
	}
	runJoinCases(t, cases, func(t *testing.T, tc joinCase, snap *snapshot) {
		for id, s := range snap.sessions {
			if !strings.HasPrefix(id, auditlog.MissingIDPrefix) || !slices.Contains(s.Flags, vocab.FlagMissingAuditID) ||
				slices.Contains(s.Flags, vocab.FlagAuditIDConflict) || len(s.Conflicts) > 0 {
				t.Errorf("session %s flags %v conflicts %d", id, s.Flags, len(s.Conflicts))
			}
		}
		if len(snap.sessions) != len(tc.recs) {
			t.Errorf("%d sessions for %d ID-less records", len(snap.sessions), len(tc.recs))
		}
	})
}

// TestJoinMissingAuditIDProperty feeds ID-less requests through a real
// Merger in many orders, with exec roots that carry no ID and forged roots
// that carry the synthetic keys: no two requests merge or conflict, no
// process is ever attributed by ID to an ID-less session, and the answer
// does not depend on the order.
func TestJoinMissingAuditIDProperty(t *testing.T) {
	seed, rng := propertyRand(t)
	scenarios := 100
	if testing.Short() {
		scenarios = 20
	}
	heuristic := 0
	for s := range scenarios {
		var sc scenario
		n := 2 + rng.Intn(4)
		for i := range n {
			cmd := genCommands[rng.Intn(len(genCommands))]
			// Same user and pod in every request: only the time (never
			// equal: equal requests are one) and the command tell them apart.
			rr := t0.Add(time.Duration(rng.Intn(20))*time.Second + time.Duration(i)*time.Millisecond)
			sc.events = append(sc.events, genEvents("", "alice", "web", "app", cmd, 101, rr, rr.Add(time.Minute), false, i, "")...)
			root := with(pr(fmt.Sprintf("r%d", i), "runc", "", ""), argv(cmd...))
			root.Start, root.ExecTime = rr.Add(50*time.Millisecond), rr.Add(50*time.Millisecond)
			sc.procs = append(sc.procs, root)
		}
		// Forgers carry the key a Merger gives some request.
		m := auditlog.NewMerger(auditlog.MergerConfig{})
		var keys []string
		for _, ev := range sc.events {
			for _, r := range m.Add(ev).Updated {
				if !slices.Contains(keys, r.AuditID) {
					keys = append(keys, r.AuditID)
				}
			}
		}
		if st := m.Stats(); st.Records != n || st.Conflicts != 0 {
			t.Fatalf("seed %d scenario %d: merger holds %d records (%d conflicts) for %d requests", seed, s, st.Records, st.Conflicts, n)
		}
		for i := range 1 + rng.Intn(2) {
			sc.procs = append(sc.procs, with(pr(fmt.Sprintf("f%d", i), "runc", keys[rng.Intn(len(keys))], vocab.SourceEnv), argv("nginx")))
		}
		ref := feed(t, sc, rng, 0)
		for _, p := range ref.procs {
			checkClaimRule(t, &p)
			if p.Attribution == vocab.AttributionAuditID || p.Attribution == vocab.AttributionInherited {
				t.Fatalf("seed %d scenario %d: %s attributed %s to ID-less session %s", seed, s, p.ProcessID, p.Attribution, p.AuditID)
			}
			if p.Attribution == vocab.AttributionHeuristic {
				heuristic++
			}
		}
		for id, se := range ref.sessions {
			if !slices.Contains(se.Flags, vocab.FlagMissingAuditID) || slices.Contains(se.Flags, vocab.FlagAuditIDConflict) {
				t.Fatalf("seed %d scenario %d: session %s flags %v", seed, s, id, se.Flags)
			}
		}
		want := ref.canonical()
		for o := range 12 {
			if got := feed(t, sc, rng, o%4).canonical(); got != want {
				t.Fatalf("seed %d scenario %d order %d: final state differs\n%s", seed, s, o, diffLines(want, got))
			}
		}
	}
	if heuristic == 0 {
		t.Errorf("seed %d: no ID-less root was matched by the heuristic", seed)
	}
}
