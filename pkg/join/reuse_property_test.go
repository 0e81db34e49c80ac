package join

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// kepSession is a generated session whose roots carry its audit ID.
type kepSession struct {
	id, ctr, cid, root string
	start              time.Time
}

// addReuse adds mallory: a genuine exec of her own (a verified root, the
// runtime's) under a victim session's audit ID, sent as her Audit-ID
// header. Her request is received a random while after the victim's root
// started (within the clock skew, or well past it), into the victim's
// container or another; its record is delivered or not, allowed or
// refused. The victim's processes lose their exact expectations (a reuse
// within the skew makes them ambiguous); the truth check still holds
// everyone to their own request.
func addReuse(rng *rand.Rand, sc *scenario) {
	v := sc.keps[rng.Intn(len(sc.keps))]
	ctr, cid := v.ctr, v.cid
	if rng.Intn(3) == 0 {
		ctr, cid = "other", "ctr-other"
	}
	rr := v.start.Add([]time.Duration{200 * time.Millisecond, 3 * time.Second, 30 * time.Second}[rng.Intn(3)])
	code := int32(101)
	if rng.Intn(6) == 0 {
		code = 403
	}
	uri := ""
	if rng.Intn(3) != 0 {
		evs := genEvents(v.id, "mallory", "web", ctr, []string{"sh"}, code, rr, rr.Add(time.Minute), false, 99, "&reuse=1")
		sc.events = append(sc.events, evs...)
		if code == 101 {
			uri = evs[0].RequestURI
		}
	}
	root := Process{Exec: capture.Exec{ProcessID: "m-r", ParentProcessID: "runc-m", Argv: []string{"sh"}, Filename: "/bin/sh",
		ContainerID: cid, PodUID: "uid-web"}, Start: rr.Add(time.Duration(100+rng.Intn(1400)) * time.Millisecond),
		Namespace: "ns", Pod: "web", Container: ctr,
		Captured: capture.KeyValue{Value: v.id, Source: vocab.SourceEnv}}
	root.ExecTime = root.Start
	tree := []Process{root}
	for k := range rng.Intn(3) {
		par := tree[rng.Intn(len(tree))]
		c := root
		c.ProcessID, c.ParentProcessID, c.Argv = fmt.Sprintf("m-c%d", k), par.ProcessID, []string{"id"}
		c.Start = par.Start.Add(time.Duration(1+rng.Intn(2000)) * time.Millisecond)
		c.ExecTime = c.Start
		c.Captured.Source = vocab.SourceInherited
		if rng.Intn(2) == 0 {
			c.SessionRootID = root.ProcessID
		}
		tree = append(tree, c)
	}
	for _, p := range tree {
		sc.procs = append(sc.procs, p)
		sc.truth[p.ProcessID] = uri
	}
	for pid := range sc.expect {
		if p := procByID(sc.procs, pid); p != nil && p.Captured.Value == v.id {
			delete(sc.expect, pid)
		}
	}
}

func procByID(procs []Process, id string) *Process {
	for i := range procs {
		if procs[i].ProcessID == id {
			return &procs[i]
		}
	}
	return nil
}

// checkTruth: a process attributed by ID (audit_id, inherited) belongs to
// the session of the request that started its root, and a process whose
// request is absent or refused is attributed by ID to nobody.
func checkTruth(t *testing.T, seed int64, s int, sc *scenario, snap *snapshot) {
	t.Helper()
	for id, p := range snap.procs {
		if p.Attribution != vocab.AttributionAuditID && p.Attribution != vocab.AttributionInherited {
			continue
		}
		want, known := sc.truth[id]
		if !known {
			continue
		}
		got := snap.sessions[p.AuditID].RequestURI
		if got != want {
			t.Fatalf("seed %d scenario %d: %s attributed %s to session %s (%s), want the request %q",
				seed, s, id, p.Attribution, p.AuditID, got, want)
		}
	}
}
