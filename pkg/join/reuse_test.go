package join

import (
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// The reuse cases: mallory sends alice's audit ID (idA) as her Audit-ID
// header with a genuine exec of her own, so the runtime hands alice's ID to
// mallory's verified root. Alice's request is received at t0 and her root
// starts 1 s later; mallory's root starts at t0+10s.

// malloryA is mallory's request under idA, received at rr.
func malloryA(rr time.Time, mods ...func(*auditlog.ExecRecord)) auditlog.ExecRecord {
	return rwith(xr(idA), func(r *auditlog.ExecRecord) {
		r.User = auditlog.UserInfo{Username: "mallory", Groups: []string{"ops"}}
		r.RequestURI += "&mallory"
		r.RequestReceivedTimestamp, r.EndTimestamp = rr, rr.Add(40*time.Second)
		for _, m := range mods {
			m(r)
		}
	})
}

// reuseProcs are alice's root and child and mallory's root and child.
func reuseProcs(malloryStart time.Time, mods ...func(*Process)) []Process {
	rm := with(pr("rm", "runc-m", idA, vocab.SourceEnv), func(p *Process) { p.Start, p.ExecTime = malloryStart, malloryStart })
	cm := with(pr("cm", "rm", idA, vocab.SourceInherited), func(p *Process) {
		p.Start, p.ExecTime, p.SessionRootID = malloryStart.Add(time.Second), malloryStart.Add(time.Second), "rm"
	})
	for _, m := range mods {
		m(&rm)
		m(&cm)
	}
	return []Process{
		pr("ra", "runc", idA, vocab.SourceEnv),
		with(pr("ca", "ra", idA, vocab.SourceInherited), func(p *Process) { p.SessionRootID = "ra" }),
		rm, cm,
	}
}

func TestJoinReusedAuditID(t *testing.T) {
	conflict, reused := vocab.FlagAuditIDConflict, vocab.FlagAuditIDReused
	mal := malloryA(t0.Add(9 * time.Second))
	mKey := sessionKey(idA, &mal, false)
	inSide := func(p *Process) { p.Container, p.ContainerID = "side", "ctr-side" }
	sideRec := malloryA(t0.Add(9*time.Second), func(r *auditlog.ExecRecord) { r.Container = "side" })
	sideKey := sessionKey(idA, &sideRec, false)
	early := malloryA(t0.Add(1500 * time.Millisecond))
	earlyKey := sessionKey(idA, &early, false)
	denied := malloryA(t0.Add(9*time.Second), func(r *auditlog.ExecRecord) { r.Code, r.Decision = 403, "forbid" })
	cases := []joinCase{
		{
			name:  "mallory's request not logged (yet): her root holds nothing",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: reuseProcs(t0.Add(10 * time.Second)),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA},
				"ca": {attr: vocab.AttributionInherited, auditID: idA},
				"rm": {claimed: idA, flags: []string{reused}},
				"cm": {claimed: idA, flags: []string{reused}},
			},
		},
		{
			name:  "mallory's request never logged, past the TTL",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: reuseProcs(t0.Add(10 * time.Second)),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA},
				"rm": {claimed: idA, flags: []string{reused, vocab.FlagNoAuditRecord}},
				"cm": {claimed: idA, flags: []string{reused, vocab.FlagNoAuditRecord}},
			},
			expire: true,
		},
		{
			name:  "both requests logged: each session is its own user's",
			recs:  []auditlog.ExecRecord{xr(idA), mal},
			procs: reuseProcs(t0.Add(10 * time.Second)),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{conflict}},
				"ca": {attr: vocab.AttributionInherited, auditID: idA, flags: []string{conflict}},
				"rm": {attr: vocab.AttributionAuditID, auditID: mKey, flags: []string{conflict}},
				"cm": {attr: vocab.AttributionInherited, auditID: mKey, flags: []string{conflict}},
			},
		},
		{
			name:  "reused within the clock skew: the order cannot tell, neither user's",
			recs:  []auditlog.ExecRecord{xr(idA), early},
			procs: reuseProcs(t0.Add(2 * time.Second)),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAmbiguous, claimed: idA, cands: []string{idA, earlyKey}, flags: []string{conflict}},
				"ca": {attr: vocab.AttributionAmbiguous, claimed: idA, cands: []string{idA, earlyKey}, flags: []string{conflict}},
				"rm": {attr: vocab.AttributionAmbiguous, claimed: idA, cands: []string{idA, earlyKey}, flags: []string{conflict}},
			},
		},
		{
			name:  "replayed into another container, its request not logged",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: reuseProcs(t0.Add(10*time.Second), inSide),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA},
				"rm": {claimed: idA, flags: []string{vocab.FlagPodMismatch}},
			},
		},
		{
			name:  "replayed into another container, both logged: paired by container",
			recs:  []auditlog.ExecRecord{xr(idA), sideRec},
			procs: reuseProcs(t0.Add(10*time.Second), inSide),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{conflict}},
				"rm": {attr: vocab.AttributionAuditID, auditID: sideKey, flags: []string{conflict}},
				"cm": {attr: vocab.AttributionInherited, auditID: sideKey, flags: []string{conflict}},
			},
		},
		{
			name:  "denied reuse beside a root nobody's request started",
			recs:  []auditlog.ExecRecord{xr(idA), denied},
			procs: reuseProcs(t0.Add(10 * time.Second)),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{conflict}},
				"rm": {claimed: idA, flags: []string{conflict, reused}},
			},
		},
		{
			name:  "a root after the ID's only request ended",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: reuseProcs(t0.Add(2 * time.Minute)),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA},
				"rm": {claimed: idA, flags: []string{reused}},
			},
		},
		{
			name:  "two roots at the same instant, one request: neither is sure",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: reuseProcs(t0.Add(time.Second)),
			want: map[string]want{
				"ra": {attr: vocab.AttributionAmbiguous, claimed: idA, cands: []string{idA}, flags: []string{reused}},
				"rm": {attr: vocab.AttributionAmbiguous, claimed: idA, cands: []string{idA}, flags: []string{reused}},
			},
		},
		{
			name: "mallory's root seen before alice's request: it waits, unflagged, and is not alice's",
			recs: []auditlog.ExecRecord{mal},
			procs: []Process{
				with(pr("ra", "runc", idA, vocab.SourceEnv), func(p *Process) { p.Start = t0.Add(time.Second) }),
				with(pr("rm", "runc-m", idA, vocab.SourceEnv), func(p *Process) { p.Start = t0.Add(10 * time.Second) }),
			},
			want: map[string]want{
				"ra": {claimed: idA},
				"rm": {attr: vocab.AttributionAuditID, auditID: idA},
			},
		},
	}
	runJoinCases(t, cases, func(t *testing.T, tc joinCase, snap *snapshot) {
		// Every attributed process's session is its own user's request.
		users := map[string]string{"ra": "alice", "ca": "alice", "rm": "mallory", "cm": "mallory"}
		for id, p := range snap.procs {
			if !p.Attribution.Counted() {
				continue
			}
			s, ok := snap.sessions[p.AuditID]
			if !ok {
				t.Fatalf("%s: attributed to %s, which no session row names", id, p.AuditID)
			}
			if s.User.Username != users[id] {
				t.Errorf("%s: attributed to %s's session %s, want %s's", id, s.User.Username, p.AuditID, users[id])
			}
		}
	})
}

// A root's hold on its request outlives the root: alice's session ran and
// exited, the joiner forgot her processes, and mallory's root under her ID
// still holds nothing. The control: with no earlier root, the same root is
// attributed.
func TestJoinRootHoldOutlivesTheRoot(t *testing.T) {
	open := rwith(xr(idA), func(r *auditlog.ExecRecord) {
		r.Stages, r.EndTimestamp = []string{auditlog.StageRequestReceived, auditlog.StageResponseStarted}, time.Time{}
	})
	rm := with(pr("rm", "runc-m", idA, vocab.SourceEnv), func(p *Process) { p.Start = t0.Add(20 * time.Minute) })
	for _, control := range []bool{false, true} {
		j := newJoiner(t, noLateWindow)
		snap := newSnapshot()
		snap.apply(j.AddRecord(t0, open))
		if !control {
			snap.apply(j.AddProcess(t0, pr("ra", "runc", idA, vocab.SourceEnv)))
			snap.apply(j.AddExit(t0, Exit{ProcessID: "ra", Time: t0.Add(2 * time.Second)}))
			snap.apply(j.Expire(t0.Add(DefaultPendingTTL + time.Minute)))
			if _, ok := j.Process("ra"); ok {
				t.Fatal("alice's exited root still held: the test proves nothing")
			}
			// Past the roots' reach: an open request's roots are not aged.
			snap.apply(j.Expire(t0.Add(18 * time.Minute)))
		}
		snap.apply(j.AddRecord(t0.Add(19*time.Minute), open)) // a redelivery keeps the record
		snap.apply(j.AddProcess(t0.Add(20*time.Minute), rm))
		got := snap.procs["rm"]
		w := want{claimed: idA, flags: []string{vocab.FlagAuditIDReused}}
		if control {
			w = want{attr: vocab.AttributionAuditID, auditID: idA}
		}
		checkWant(t, "rm", got, w)
	}
}

// The heuristic scores the argv the runtime exec'd: dave's root ran
// `sh -c '...; /bin/sleep 3'`, whose last command execs in place, so the
// process later reads `/bin/sleep 3`, carol's command. Each session stays
// exact, and one request never gets two ID-less roots.
func TestJoinHeuristicFirstImage(t *testing.T) {
	daveCmd := []string{"/bin/sh", "-c", "/bin/head -c1 /proc/self/stat; /bin/sleep 3"}
	carol := rwith(xr(idB, "/bin/sleep", "3"), func(r *auditlog.ExecRecord) { r.User.Username = "carol" })
	dave := rwith(xr(idC, daveCmd...), func(r *auditlog.ExecRecord) {
		r.User.Username = "dave"
		r.RequestReceivedTimestamp = t0.Add(300 * time.Millisecond)
	})
	at := func(p Process, d time.Duration) Process {
		p.Start, p.ExecTime = t0.Add(d), t0.Add(d)
		return p
	}
	rc := at(with(pr("rc", "runc", "", ""), argv("/bin/sleep", "3")), 100*time.Millisecond)
	rd := at(with(pr("rd", "runc-d", "", ""), argv(daveCmd...)), 400*time.Millisecond)
	rdAgain := with(at(with(pr("rd", "runc-d", "", ""), argv("/bin/sleep", "3")), 400*time.Millisecond),
		func(p *Process) { p.ExecTime = t0.Add(450 * time.Millisecond) })
	twin := at(with(pr("rx", "runc-x", "", ""), argv("/bin/sleep", "3")), 200*time.Millisecond)
	cases := []joinCase{
		{
			name:  "dave's root exec'd in place: scored by its first image",
			recs:  []auditlog.ExecRecord{carol, dave},
			procs: []Process{rc, rd, rdAgain},
			want: map[string]want{
				"rc": {attr: vocab.AttributionHeuristic, auditID: idB, minConf: 0.8},
				"rd": {attr: vocab.AttributionHeuristic, auditID: idC, minConf: 0.8},
			},
		},
		{
			name:  "the re-exec seen first",
			recs:  []auditlog.ExecRecord{carol, dave},
			procs: []Process{rdAgain, rc, rd},
			want: map[string]want{
				"rc": {attr: vocab.AttributionHeuristic, auditID: idB, minConf: 0.8},
				"rd": {attr: vocab.AttributionHeuristic, auditID: idC, minConf: 0.8},
			},
		},
		{
			name:  "two ID-less roots for one request: neither is sure",
			recs:  []auditlog.ExecRecord{carol},
			procs: []Process{rc, twin},
			want: map[string]want{
				"rc": {attr: vocab.AttributionAmbiguous, cands: []string{idB}},
				"rx": {attr: vocab.AttributionAmbiguous, cands: []string{idB}},
			},
		},
		{
			name:  "a request a verified root holds is no candidate",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{pr("ra", "runc", idA, vocab.SourceEnv), with(pr("rx", "runc-x", "", ""), argv("sh"))},
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA},
				"rx": {},
			},
		},
		{
			name:  "control: without the verified root, the same ID-less root is matched",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{with(pr("rx", "runc-x", "", ""), argv("sh"))},
			want:  map[string]want{"rx": {attr: vocab.AttributionHeuristic, auditID: idA, minConf: 0.8}},
		},
	}
	runJoinCases(t, cases, nil)
}

// The roots remembered are bounded: past maxRootsPerID under one ID a root
// is never attributed, and past MaxRecords in all the oldest unused ID's
// roots are forgotten; both are counted.
func TestJoinRootBounds(t *testing.T) {
	j := newJoiner(t, noLateWindow)
	j.AddRecord(t0, xr(idA))
	var last Process
	for i := range maxRootsPerID + 1 {
		last = with(pr(fmt.Sprintf("r%d", i), "runc", idA, vocab.SourceEnv), func(p *Process) {
			p.Start = t0.Add(time.Second + time.Duration(i)*time.Millisecond)
		})
		j.AddProcess(t0, last)
	}
	if got := j.Stats().RootsOverCap; got != 1 {
		t.Errorf("RootsOverCap = %d, want 1", got)
	}
	got, _ := j.Process(last.ProcessID)
	checkWant(t, last.ProcessID, got, want{claimed: idA, flags: []string{vocab.FlagAuditIDReused}})
	first, _ := j.Process("r0")
	checkWant(t, "r0", first, want{attr: vocab.AttributionAuditID, auditID: idA})

	j = newJoiner(t, noLateWindow, func(c *Config) { c.MaxRecords = 2 })
	for i := range 4 {
		id := fmt.Sprintf("0b5e1c8a-0000-4000-8000-%012d", i)
		j.AddProcess(t0, pr(fmt.Sprintf("p%d", i), "runc", id, vocab.SourceEnv))
		j.AddExit(t0, Exit{ProcessID: fmt.Sprintf("p%d", i), Time: t0})
		j.Expire(t0.Add(time.Hour))
	}
	if j.rootCount > 2 || j.Stats().EvictedRoots < 2 {
		t.Errorf("roots held %d, evicted %d: want at most 2 held and the rest counted", j.rootCount, j.Stats().EvictedRoots)
	}
}

// After a restart the joiner starts empty: the roots a store kept under an
// ID hold their requests again (RestoreRoots), so mallory's descendants,
// whose root reused alice's ID before the restart, stay unattributed. The
// control, without the restore, shows the gap it closes: her child would
// be taken for alice's.
func TestJoinRestoredRoots(t *testing.T) {
	stored := []Process{
		with(pr("ra", "runc", "", vocab.SourceEnv), func(p *Process) {
			p.SessionRootID, p.Attribution, p.AuditID, p.Source = "ra", vocab.AttributionAuditID, idA, vocab.SourceEnv
		}),
		with(pr("rm", "runc-m", "", vocab.SourceEnv), func(p *Process) {
			p.SessionRootID, p.ClaimedAuditID, p.Flags, p.Source = "rm", idA, []string{vocab.FlagAuditIDReused}, vocab.SourceEnv
			p.Start = t0.Add(10 * time.Second)
		}),
		// Neither a forged root nor another ID's root is one of idA's.
		with(pr("rf", "init", "", vocab.SourceEnv), func(p *Process) {
			p.SessionRootID, p.ClaimedAuditID, p.Flags, p.Source = "rf", idA, []string{vocab.FlagRootUnverified}, vocab.SourceEnv
		}),
	}
	child := func(id, root string) Process {
		return with(pr(id, root, idA, vocab.SourceInherited), func(p *Process) {
			p.SessionRootID, p.Start = root, t0.Add(20*time.Second)
		})
	}
	for _, restore := range []bool{true, false} {
		j := newJoiner(t)
		snap := newSnapshot()
		if restore {
			snap.apply(j.RestoreRoots(t0, idA, stored))
			if len(snap.procs) != 0 {
				t.Errorf("restoring roots emitted process rows: %v", snap.procs)
			}
		}
		snap.apply(j.AddProcess(t0, child("ca", "ra")))
		snap.apply(j.AddProcess(t0, child("cm", "rm")))
		snap.apply(j.AddRecord(t0, xr(idA)))
		if !restore {
			if got := snap.procs["cm"]; got.Attribution != vocab.AttributionInherited {
				t.Fatalf("control: without the restore mallory's child is %q, so the test proves nothing", got.Attribution)
			}
			continue
		}
		checkWant(t, "ca", snap.procs["ca"], want{attr: vocab.AttributionInherited, auditID: idA})
		checkWant(t, "cm", snap.procs["cm"], want{claimed: idA, flags: []string{vocab.FlagAuditIDReused}})
	}
}
