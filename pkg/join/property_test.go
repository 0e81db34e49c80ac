package join

import (
	"fmt"
	"math/rand"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// scenario is one generated node's worth of events, with what the rules say
// about the processes whose answer is not a judgement call.
type scenario struct {
	procs  []Process
	exits  []Exit
	events []auditlog.Event
	expect map[string]want // checked exactly (flags aside)
	// truth maps a process to the request URI that started its session
	// ("" for none): no process is attributed by ID to another request.
	truth map[string]string
	keps  []kepSession // sessions whose roots carry their ID, for reuse
}

var (
	genCommands = [][]string{{"sh"}, {"bash"}, {"ls", "-la"}, {"cat", "/etc/passwd"}, {"sh", "-c", "id"}}
	genChild    = [][]string{{"id"}, {"cat", "x"}, {"sleep", "1"}, {"sh"}}
	genUsers    = []string{"alice", "bob", "carol"}
)

func genScenario(rng *rand.Rand) scenario {
	sc := scenario{expect: map[string]want{}, truth: map[string]string{}}
	n := 2 + rng.Intn(4)
	var ids []string
	for i := range n {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		ids = append(ids, id)
		ctr, cid := "app", "ctr-app"
		if rng.Intn(4) == 0 {
			ctr, cid = "side", "ctr-side"
		}
		cmd := genCommands[rng.Intn(len(genCommands))]
		rr := t0.Add(time.Duration(rng.Intn(20)) * time.Second)
		end := rr.Add(time.Duration(1+rng.Intn(60)) * time.Second)
		mode := []string{"kep", "kep", "kep", "none", "placeholder", "spo"}[rng.Intn(6)]
		code := int32(101)
		if rng.Intn(10) == 0 {
			code = 403
		}
		delivered, replayed, conflict := rng.Intn(8) != 0, rng.Intn(10) == 0, rng.Intn(20) == 0
		pod := "web"
		if replayed {
			pod = "db"
		}
		uri := ""
		if delivered {
			user := genUsers[rng.Intn(len(genUsers))]
			evs := genEvents(id, user, pod, ctr, cmd, code, rr, end, mode == "spo", i, "")
			sc.events = append(sc.events, evs...)
			if code == 101 && !replayed {
				uri = evs[0].RequestURI
			}
			if conflict {
				other := genUsers[(rng.Intn(2)+1)%len(genUsers)]
				evs := genEvents(id, other, pod, ctr, cmd, 101, rr, end, false, i, "&spoofed=1")
				sc.events = append(sc.events, evs...)
				if code != 101 && !replayed {
					// The refused request exec'd nothing: the one root
					// is the allowed request's.
					uri = evs[0].RequestURI
				}
			}
		}
		root := Process{Exec: capture.Exec{ProcessID: fmt.Sprintf("s%d-r", i), ParentProcessID: fmt.Sprintf("runc-%d", i),

			Argv: cmd, Filename: "/bin/" + cmd[0],
			ContainerID: cid, PodUID: "uid-web"}, Start: rr.Add(time.Duration(rng.Intn(1500)) * time.Millisecond),

			Namespace: "ns", Pod: "web", Container: ctr,
		}
		setID := func(p *Process, source vocab.Source) {
			switch mode {
			case "kep":
				p.Captured.Value, p.Captured.Source = id, source
			case "placeholder":
				p.Captured.Value, p.Captured.Source, p.Captured.Flags = vocab.PlaceholderID, source, append(p.Captured.Flags, vocab.FlagPlaceholder)
			case "spo":
				p.SPO = capture.KeyValue{Value: fmt.Sprintf("spo-%d", i), Source: source}
			}
		}
		setID(&root, vocab.SourceEnv)
		tree := []Process{root}
		for k := range rng.Intn(6) {
			par := tree[rng.Intn(len(tree))]
			c := Process{Exec: capture.Exec{ProcessID: fmt.Sprintf("s%d-c%d", i, k), ParentProcessID: par.ProcessID,

				Argv: genChild[rng.Intn(len(genChild))], ContainerID: cid, PodUID: "uid-web"}, Start: par.Start.Add(time.Duration(1+rng.Intn(3000)) * time.Millisecond),

				Namespace: "ns", Pod: "web", Container: ctr,
			}
			setID(&c, vocab.SourceInherited)
			if rng.Intn(2) == 0 {
				c.SessionRootID = root.ProcessID
			}
			if mode == "kep" && rng.Intn(8) == 0 {
				c.Captured.Flags = append(c.Captured.Flags, []string{vocab.FlagEnvRemoved, vocab.FlagEnvMismatch}[rng.Intn(2)])
			}
			tree = append(tree, c)
		}
		if mode == "kep" {
			sc.keps = append(sc.keps, kepSession{id: id, ctr: ctr, cid: cid, root: root.ProcessID, start: root.Start})
		}
		for _, p := range tree {
			p.ExecTime = p.Start
			sc.procs = append(sc.procs, p)
			sc.truth[p.ProcessID] = uri
			if rng.Intn(2) == 0 {
				sc.exits = append(sc.exits, Exit{ProcessID: p.ProcessID, Time: p.Start.Add(5 * time.Second), Code: rng.Intn(3)})
			}
			if mode == "kep" && delivered && !replayed && !conflict && code == 101 {
				w := want{attr: vocab.AttributionInherited, auditID: id}
				if p.ProcessID == root.ProcessID {
					w.attr = vocab.AttributionAuditID
				}
				sc.expect[p.ProcessID] = w
			}
		}
	}
	if rng.Intn(3) == 0 {
		// A workload process forging a live session's ID, and its child.
		victim := ids[rng.Intn(len(ids))]
		base := Process{Exec: capture.Exec{ContainerID: "ctr-app", PodUID: "uid-web"}, Namespace: "ns", Pod: "web", Container: "app"}
		w, f, fc := base, base, base
		w.ProcessID, w.ParentProcessID, w.Start, w.Argv = "w-init", "shim", t0.Add(-time.Hour), []string{"nginx"}
		f.ProcessID, f.ParentProcessID, f.Start, f.Argv = "forge", "w-init", t0.Add(3*time.Second), []string{"sh"}
		f.Captured.Value, f.Captured.Source, f.Captured.Flags, f.SessionRootID = victim, vocab.SourceEnv, []string{vocab.FlagRootUnverified}, "forge"
		fc.ProcessID, fc.ParentProcessID, fc.Start, fc.Argv = "forge-c", "forge", t0.Add(4*time.Second), []string{"id"}
		fc.Captured.Value, fc.Captured.Source, fc.Captured.Flags, fc.SessionRootID = victim, vocab.SourceInherited, []string{vocab.FlagRootUnverified}, "forge"
		sc.procs = append(sc.procs, w, f, fc)
		sc.expect["forge"] = want{claimed: victim}
		sc.expect["forge-c"] = want{claimed: victim}
	}
	if len(sc.keps) > 0 && rng.Intn(2) == 0 {
		addReuse(rng, &sc)
	}
	if rng.Intn(3) == 0 {
		addDebug(rng, &sc)
	}
	return sc
}

// genEvents renders one request's audit stages as the apiserver writes them.
func genEvents(id, user, pod, ctr string, cmd []string, code int32, rr, end time.Time, spo bool, i int, extra string) []auditlog.Event {
	q := url.Values{"container": {ctr}, "stdin": {"true"}, "command": cmd}
	uri := "/api/v1/namespaces/ns/pods/" + pod + "/exec?" + q.Encode() + extra
	ann := map[string]string{auditlog.AnnotationDecision: "allow"}
	if code == 403 {
		ann[auditlog.AnnotationDecision] = "forbid"
	}
	if spo {
		ann["execmetadata.spo.io/"+vocab.SPOKey] = fmt.Sprintf("spo-%d", i)
	}
	mk := func(stage string, at time.Time, status int32) auditlog.Event {
		ev := auditlog.Event{
			AuditID: id, Stage: stage, RequestURI: uri, Verb: "create",
			User:                     auditlog.UserInfo{Username: user, Groups: []string{"dev"}},
			ObjectRef:                &auditlog.ObjectReference{Resource: "pods", Namespace: "ns", Name: pod, Subresource: "exec"},
			RequestReceivedTimestamp: auditlog.Time{Time: rr}, StageTimestamp: auditlog.Time{Time: at},
			Annotations: ann,
		}
		if status != 0 {
			ev.ResponseStatus = &auditlog.Status{Code: status}
		}
		return ev
	}
	if code == 403 {
		return []auditlog.Event{mk(auditlog.StageRequestReceived, rr, 0), mk(auditlog.StageResponseComplete, rr, 403)}
	}
	return []auditlog.Event{
		mk(auditlog.StageRequestReceived, rr, 0),
		mk(auditlog.StageResponseStarted, rr.Add(100*time.Millisecond), 101),
		mk(auditlog.StageResponseComplete, end, 101),
	}
}

// feed delivers the scenario in one order through a real Merger and returns
// the final state of every row.
func feed(t *testing.T, sc scenario, rng *rand.Rand, mode int) *snapshot {
	j := newJoiner(t)
	m := auditlog.NewMerger(auditlog.MergerConfig{})
	snap := newSnapshot()
	now := t0.Add(90 * time.Second)
	var procSide, auditSide []func()
	for _, p := range sc.procs {
		procSide = append(procSide, func() { snap.apply(j.AddProcess(now, p)) })
	}
	for _, e := range sc.exits {
		procSide = append(procSide, func() { snap.apply(j.AddExit(now, e)) })
	}
	for _, ev := range sc.events {
		auditSide = append(auditSide, func() {
			for _, r := range m.Add(ev).Updated {
				snap.apply(j.AddRecord(now, r))
			}
		})
	}
	var steps []func()
	switch mode {
	case 0: // everything interleaved
		steps = append(procSide, auditSide...)
		rng.Shuffle(len(steps), func(a, b int) { steps[a], steps[b] = steps[b], steps[a] })
	case 1, 2: // one side entirely first, each side shuffled
		rng.Shuffle(len(procSide), func(a, b int) { procSide[a], procSide[b] = procSide[b], procSide[a] })
		rng.Shuffle(len(auditSide), func(a, b int) { auditSide[a], auditSide[b] = auditSide[b], auditSide[a] })
		steps = append(procSide, auditSide...)
		if mode == 2 {
			steps = append(auditSide, procSide...)
		}
	default: // a random split point: some audit events before, the rest after
		rng.Shuffle(len(auditSide), func(a, b int) { auditSide[a], auditSide[b] = auditSide[b], auditSide[a] })
		k := rng.Intn(len(auditSide) + 1)
		steps = append(append(append(steps, auditSide[:k]...), procSide...), auditSide[k:]...)
	}
	for _, s := range steps {
		s()
	}
	snap.apply(j.Expire(t0.Add(time.Hour)))
	return snap
}

func TestJoinOrderIndependence(t *testing.T) {
	seed, rng := propertyRand(t)
	scenarios, orders := 200, 24
	if testing.Short() {
		scenarios = 30
	}
	seen := map[string]int{}
	for s := range scenarios {
		sc := genScenario(rng)
		ref := feed(t, sc, rng, 0)
		for _, p := range ref.procs {
			checkClaimRule(t, &p)
			seen["attribution="+string(p.Attribution)]++
			for _, f := range p.Flags {
				seen[f]++
			}
		}
		checkTruth(t, seed, s, &sc, ref)
		for id, w := range sc.expect {
			got := ref.procs[id]
			if got.Attribution != w.attr || got.AuditID != w.auditID || (w.claimed != "" && got.ClaimedAuditID != w.claimed) {
				t.Fatalf("seed %d scenario %d: %s: got %q/%s claimed %s, want %q/%s claimed %s", seed, s, id,
					got.Attribution, got.AuditID, got.ClaimedAuditID, w.attr, w.auditID, w.claimed)
			}
		}
		if n := uniqueProcs(sc.procs); len(ref.procs) != n {
			t.Fatalf("seed %d scenario %d: %d processes emitted, want %d", seed, s, len(ref.procs), n)
		}
		if p, ok := ref.procs["d-r"]; ok && p.Attribution == vocab.AttributionAuditID {
			seen["debug container attributed"]++
		}
		want := ref.canonical()
		for o := range orders {
			if got := feed(t, sc, rng, o%4).canonical(); got != want {
				t.Fatalf("seed %d scenario %d order %d (mode %d): final state differs\n%s", seed, s, o, o%4, diffLines(want, got))
			}
		}
	}
	t.Logf("outcomes over %d scenarios: %v", scenarios, seen)
	if testing.Short() {
		return
	}
	// The generator must reach every outcome, or the property proves little.
	for _, k := range []string{
		"attribution=audit_id", "attribution=inherited", "attribution=heuristic", "attribution=ambiguous", "attribution=",
		vocab.FlagPodMismatch, vocab.FlagDeniedExec, vocab.FlagNoAuditRecord, vocab.FlagRootUnverified, vocab.FlagAuditIDConflict,
		vocab.FlagEnvMismatch, vocab.FlagEnvRemoved, vocab.FlagPlaceholder, vocab.FlagAuditIDReused,
		"debug container attributed",
	} {
		if seen[k] == 0 {
			t.Errorf("seed %d: no process with %s", seed, k)
		}
	}
}

// uniqueProcs counts the processes, a re-exec (the same ID again) once.
func uniqueProcs(procs []Process) int {
	ids := map[string]bool{}
	for _, p := range procs {
		ids[p.ProcessID] = true
	}
	return len(ids)
}

func diffLines(a, b string) string {
	in := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		in[l]++
	}
	var out []string
	for _, l := range strings.Split(b, "\n") {
		if in[l] > 0 {
			in[l]--
			continue
		}
		out = append(out, "+ "+l)
	}
	for l, n := range in {
		if n > 0 {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}

// checkClaimRule is the claim rule as a property of every emitted process: a
// session's ID names the process's session only when the process is
// attributed to it; any other ID it carried is only a claim.
func checkClaimRule(t *testing.T, p *Process) {
	t.Helper()
	if p.Attribution == vocab.AttributionNone && p.AuditID != "" {
		t.Fatalf("%s: unattributed process names session %s (claim rule)", p.ProcessID, p.AuditID)
	}
	if p.Attribution == vocab.AttributionAmbiguous && p.AuditID != "" && !slices.Contains(p.Candidates, p.AuditID) {
		t.Fatalf("%s: ambiguous process names session %s outside its candidates %v", p.ProcessID, p.AuditID, p.Candidates)
	}
	if p.Attribution.Counted() && p.AuditID == "" {
		t.Fatalf("%s: %s attribution without a session", p.ProcessID, p.Attribution)
	}
}
