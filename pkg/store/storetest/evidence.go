package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// withEvidence is p with the joiner's input evidence, every member set
// to values of its own (hidden is what of them the API must not serve),
// and a record delay, which it serves.
func withEvidence(p join.Process, delay float64) join.Process {
	p.Captured = capture.KeyValue{Value: "cap-value-" + p.ProcessID, Claimed: "cap-claimed", Source: vocab.SourceInherited,
		Flags: []string{"cap-flag"}}
	p.SPO = capture.KeyValue{Value: "spo-hidden-uid", Source: vocab.SourceEnv}
	p.Bridge = capture.KeyValue{Value: "bridge-hidden", Claimed: "bridge-claimed", Flags: []string{"bridge-flag", ""}}
	p.ExecOrigin = capture.OriginRuntimeChild
	p.RecordDelay = delay
	return p
}

// hidden are strings of withEvidence's that no served field holds.
var hidden = []string{"evidence", "captured", "Captured", "execOrigin", "ExecOrigin", "cap-", "spo-hidden", "bridge-",
	string(capture.OriginRuntimeChild)}

// sameEvidence checks that got's processes hold want's evidence and
// record delay, and that what the API serves of them (their JSON) holds
// the delay and none of the evidence.
func sameEvidence(t *testing.T, what string, got, want []join.Process) {
	t.Helper()
	sameJSON(t, what, got, want)
	for i := range got {
		g, w := &got[i], &want[i]
		for _, kv := range [...]struct {
			name      string
			got, want any
		}{
			{"Captured", g.Captured, w.Captured}, {"SPO", g.SPO, w.SPO}, {"Bridge", g.Bridge, w.Bridge},
			{"ExecOrigin", g.ExecOrigin, w.ExecOrigin}, {"RecordDelay", g.RecordDelay, w.RecordDelay},
		} {
			if fmt.Sprintf("%#v", kv.got) != fmt.Sprintf("%#v", kv.want) {
				t.Errorf("%s: %s %s read back %#v, want %#v", what, g.ProcessID, kv.name, kv.got, kv.want)
			}
		}
		served, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hidden {
			if strings.Contains(string(served), h) {
				t.Errorf("%s: %s is served with %q: %s", what, g.ProcessID, h, served)
			}
		}
		if w.RecordDelay != 0 && !strings.Contains(string(served), `"recordDelaySeconds":`) {
			t.Errorf("%s: %s is served without its record delay: %s", what, g.ProcessID, served)
		}
	}
}

// testEvidence: the joiner's input evidence and the record delay of a
// process read back as written, from a running process's row, a settled
// one's, an exit written alone onto the first and an exit alone of a
// process the store lacked, through the list and the session (members and
// claimants); the API's JSON of each still holds no evidence. A process
// without evidence reads back none. Control: the hidden values are the
// process's, set before the write (sameEvidence compares them).
func testEvidence(t *testing.T, s store.Backend) {
	ctx := context.Background()
	write(t, s, store.Batch{Sessions: []join.Session{session("s1", "alice", 0)}})
	running := withEvidence(process("running", "s1", 2), 0)
	settled := withEvidence(process("settled", "s1", 3), 1.5)
	settled.Exit, settled.ExitCode = at(4), ptr(0)
	claimant := withEvidence(process("claimant", "", 5), 0.25) // a late record's: unattributed, claimed s1
	claimant.Attribution, claimant.ClaimedAuditID, claimant.Source = vocab.AttributionNone, "s1", ""
	plain := process("plain", "s1", 6)
	write(t, s, store.Batch{Processes: []join.Process{running, settled, claimant, plain}})
	if running.Captured.Value == "" || running.ExecOrigin == "" || settled.RecordDelay == 0 {
		t.Fatal("control: the fixtures hold no evidence")
	}
	list, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sameEvidence(t, "listed", list, []join.Process{plain, claimant, settled, running})

	// An exit alone onto the running process's row, and one of a process
	// the store lacks, which is stored whole.
	exited := running
	exited.Exit, exited.ExitCode = at(7), ptr(1)
	never := withEvidence(process("never", "s1", 8), 3)
	never.Exit, never.ExitCode = at(9), ptr(0)
	write(t, s, store.Batch{Exits: []join.Process{exited, never}})
	d, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	sameEvidence(t, "session's processes", d.Processes, []join.Process{exited, settled, plain, never})
	sameEvidence(t, "session's claimants", d.Claimants, []join.Process{claimant})
	list, _, err = s.ListProcesses(ctx, store.ProcessFilter{Unattributed: true})
	if err != nil {
		t.Fatal(err)
	}
	sameEvidence(t, "listed unattributed", list, []join.Process{claimant})
}

// testUnattributed: the Unattributed filter selects the processes with
// no attribution, running and settled, newest first, in pages, within
// Since and Until and with the other filters; none of the attributed
// (audit_id, inherited, heuristic, ambiguous) ones. Control: without it
// the list holds every process.
func testUnattributed(t *testing.T, s store.Backend) {
	var b store.Batch
	b.Sessions = []join.Session{session("s1", "alice", 0)}
	for i, a := range []vocab.Attribution{vocab.AttributionAuditID, vocab.AttributionInherited,
		vocab.AttributionHeuristic, vocab.AttributionAmbiguous} {
		p := process(fmt.Sprintf("a%d", i), "s1", 10*i+10)
		p.Attribution = a
		if a == vocab.AttributionAmbiguous {
			p.AuditID, p.Candidates = "", []string{"s1", "s2"}
		}
		if i%2 == 1 {
			p.Exit, p.ExitCode = at(10*i+11), ptr(0)
		}
		b.Processes = append(b.Processes, p)
	}
	for i := range 5 {
		p := process(fmt.Sprintf("u%d", i), "", 10*i+5)
		p.Attribution, p.Source = vocab.AttributionNone, ""
		switch i % 3 {
		case 0: // settled: a finished process whose record never came
			p.Exit, p.ExitCode = at(10*i+6), ptr(0)
		case 1: // its record never came
			p.ClaimedAuditID, p.Flags = "s9", []string{vocab.FlagNoAuditRecord}
		}
		if i == 3 {
			p.Pod = "db-0"
		}
		b.Processes = append(b.Processes, p)
	}
	write(t, s, b)
	sameIDs(t, "control: every process", allProcesses(t, s, store.ProcessFilter{}),
		[]string{"u4", "a3", "u3", "a2", "u2", "a1", "u1", "a0", "u0"})
	cases := []struct {
		f    store.ProcessFilter
		want []string
	}{
		{store.ProcessFilter{Unattributed: true}, []string{"u4", "u3", "u2", "u1", "u0"}},
		{store.ProcessFilter{Unattributed: true, Limit: 2}, []string{"u4", "u3", "u2", "u1", "u0"}},
		{store.ProcessFilter{Unattributed: true, Limit: 1, Since: at(15)}, []string{"u4", "u3", "u2", "u1"}},
		{store.ProcessFilter{Unattributed: true, Limit: 2, Since: at(15), Until: at(45)}, []string{"u3", "u2", "u1"}},
		{store.ProcessFilter{Unattributed: true, Since: at(16), Until: at(25)}, nil},
		{store.ProcessFilter{Unattributed: true, Pod: "db-0"}, []string{"u3"}},
		{store.ProcessFilter{Unattributed: true, Pod: "web-0", Limit: 3}, []string{"u4", "u2", "u1", "u0"}},
		{store.ProcessFilter{Unattributed: true, Command: "echo u3"}, []string{"u3"}},
		{store.ProcessFilter{Unattributed: true, Attribution: vocab.AttributionHeuristic}, nil},
	}
	for _, c := range cases {
		sameIDs(t, fmt.Sprintf("%+v", c.f), allProcesses(t, s, c.f), c.want)
	}
}
