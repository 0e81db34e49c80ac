package join

import (
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// What the exec bridge covers beyond an exec: kubectl debug's ephemeral
// container, whose init the runtime starts with the bridge's ID in its env;
// and what it cannot cover: an exec that bypassed admission, which is
// nobody's session and says so.

// debugRecord is alice's pods/ephemeralcontainers request adding container
// ctr, annotated by the bridge with bridge ID b.
func debugRecord(id, b, ctr string) auditlog.ExecRecord {
	return rwith(bridged(id, b, "alice", t0), func(r *auditlog.ExecRecord) {
		r.Verb, r.Subresource, r.Container, r.Command, r.Code = "patch", auditlog.SubresourceEphemeralContainers, ctr, nil, 200
		r.RequestURI = "/api/v1/namespaces/ns/pods/web/ephemeralcontainers"
	})
}

// debugInit is the init of container ctr in pod web, started by the
// runtime (container_init) with bridge ID b in its env: the kernel cannot
// verify an env it did not see the runtime exec (root_unverified).
func debugInit(id, ctr, b string, origin capture.Origin) Process {
	return with(pr(id, "containerd-shim", "", ""), func(p *Process) {
		p.Argv, p.Start, p.ExecTime, p.SessionRootID = []string{"sh"}, t0.Add(time.Second), t0.Add(time.Second), id
		p.Container, p.ContainerID, p.ExecOrigin = ctr, "ctr-"+ctr, origin
		p.Bridge = capture.KeyValue{Value: b, Source: vocab.SourceEnv, Flags: []string{vocab.FlagRootUnverified}}
	})
}

// inPlace is p's next image: the same process exec'd again by its own
// code (origin), the ID read back from its lineage (inherited).
func inPlace(p Process, origin capture.Origin) Process {
	return with(p, func(p *Process) {
		p.Argv, p.ExecOrigin = []string{"sleep", "1"}, origin
		p.ExecTime = p.ExecTime.Add(100 * time.Millisecond)
		p.Bridge.Source = vocab.SourceInherited
	})
}

func TestJoinBridgeDebugContainer(t *testing.T) {
	unverified := []string{vocab.FlagRootUnverified}
	dbg := debugRecord(idA, bridgeA, "debugger")
	cases := []joinCase{
		{
			name:  "kubectl debug: the ephemeral container's init and its children are alice's",
			recs:  []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginContainerInit), with(bchild("dc", "d", bridgeA), func(p *Process) { p.Container, p.ContainerID = "debugger", "ctr-debugger" })},
			want: map[string]want{
				"d":  {attr: vocab.AttributionAuditID, auditID: idA, flags: unverified},
				"dc": {attr: vocab.AttributionInherited, auditID: idA},
			},
		},
		{
			name: "the kubelet starts the debug container after the request completed (an image pull)",
			recs: []auditlog.ExecRecord{rwith(dbg, func(r *auditlog.ExecRecord) { r.EndTimestamp = t0.Add(100 * time.Millisecond) })},
			procs: []Process{with(debugInit("d", "debugger", bridgeA, capture.OriginContainerInit), func(p *Process) {
				p.Start, p.ExecTime = t0.Add(90*time.Second), t0.Add(90*time.Second)
			})},
			want: map[string]want{"d": {attr: vocab.AttributionAuditID, auditID: idA, flags: unverified}},
		},
		{
			name: "the init execs its last command in place (`sh -c '...; sleep 1'`): still the root, in either order",
			recs: []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginContainerInit),
				inPlace(debugInit("d", "debugger", bridgeA, capture.OriginContainerInit), capture.OriginInside)},
			want: map[string]want{"d": {attr: vocab.AttributionAuditID, auditID: idA, flags: unverified}},
		},
		{
			name: "the init execs in place twice (`sh -c 'exec sh -c \"...; cmd\"'`): still the root",
			recs: []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginContainerInit),
				inPlace(debugInit("d", "debugger", bridgeA, capture.OriginContainerInit), capture.OriginInside),
				inPlace(inPlace(debugInit("d", "debugger", bridgeA, capture.OriginContainerInit), capture.OriginInside), capture.OriginInside)},
			want: map[string]want{"d": {attr: vocab.AttributionAuditID, auditID: idA, flags: unverified}},
		},
		{
			name: "a process the container's code started with the ID in its env execs in place: still a claim",
			recs: []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginInside),
				inPlace(debugInit("d", "debugger", bridgeA, capture.OriginInside), capture.OriginInside)},
			want: map[string]want{"d": {claimed: idA, flags: unverified}},
		},
		{
			name: "an exec into the debug container with its ID in the env execs in place: still a claim",
			recs: []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginContainerInit),
				with(debugInit("x", "debugger", bridgeA, capture.OriginOtherCgroup), func(p *Process) {
					p.Start, p.ExecTime = t0.Add(3*time.Second), t0.Add(3*time.Second)
				}),
				inPlace(with(debugInit("x", "debugger", bridgeA, capture.OriginOtherCgroup), func(p *Process) {
					p.Start, p.ExecTime = t0.Add(3*time.Second), t0.Add(3*time.Second)
				}), capture.OriginInside)},
			want: map[string]want{
				"d": {attr: vocab.AttributionAuditID, auditID: idA, flags: unverified},
				"x": {claimed: idA, flags: unverified},
			},
		},
		{
			name:  "a root the runtime exec'd with the debug container's ID in its env alone: no debug container's init",
			recs:  []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginOtherCgroup)},
			want:  map[string]want{"d": {claimed: idA, flags: unverified}},
		},
		{
			name: "an exec into the debug container with its ID in the env (no bridge argv): a claim, never the debug session's",
			recs: []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginContainerInit),
				with(debugInit("x", "debugger", bridgeA, capture.OriginOtherCgroup), func(p *Process) {
					p.Start, p.ExecTime = t0.Add(3*time.Second), t0.Add(3*time.Second)
				})},
			want: map[string]want{
				"d": {attr: vocab.AttributionAuditID, auditID: idA, flags: unverified},
				"x": {claimed: idA, flags: unverified},
			},
		},
		{
			name:  "another container's init with the debug container's ID in its env: not alice's",
			recs:  []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "sidecar", bridgeA, capture.OriginContainerInit)},
			want:  map[string]want{"d": {claimed: idA, flags: []string{vocab.FlagPodMismatch, vocab.FlagRootUnverified}}},
		},
		{
			name:  "a process the container's own code started with the ID in its env: a claim",
			recs:  []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginInside)},
			want:  map[string]want{"d": {claimed: idA, flags: unverified}},
		},
		{
			name:  "a container init carrying an exec's bridge ID: the exec's root is `env`, never an init",
			recs:  []auditlog.ExecRecord{bridged(idA, bridgeA, "alice", t0)},
			procs: []Process{debugInit("d", "app", bridgeA, capture.OriginContainerInit)},
			want:  map[string]want{"d": {claimed: idA, flags: []string{vocab.FlagAuditIDReused, vocab.FlagRootUnverified}}},
		},
		{
			name: "a second init under one debug ID: one request, one root",
			recs: []auditlog.ExecRecord{dbg},
			procs: []Process{debugInit("d", "debugger", bridgeA, capture.OriginContainerInit),
				with(debugInit("d2", "debugger", bridgeA, capture.OriginContainerInit), func(p *Process) {
					p.Start, p.ExecTime = t0.Add(3*time.Second), t0.Add(3*time.Second)
				})},
			want: map[string]want{
				"d":  {attr: vocab.AttributionAuditID, auditID: idA, flags: unverified},
				"d2": {claimed: idA, flags: []string{vocab.FlagAuditIDReused, vocab.FlagRootUnverified}},
			},
		},
	}
	runJoinCases(t, cases, nil)
}

// TestJoinBridgeExecBesideDebug: an exec's bridge root (its ID in the argv
// the runtime exec'd) is never taken for a debug container's init, though
// both are started by the runtime from outside: the exec is exact.
func TestJoinBridgeExecBesideDebug(t *testing.T) {
	runJoinCases(t, []joinCase{{
		name: "a bridged exec and a debug container in one pod, each its own",
		recs: []auditlog.ExecRecord{bridged(idA, bridgeA, "alice", t0), debugRecord(idB, bridgeB, "debugger")},
		procs: []Process{with(broot("ra", bridgeA, time.Second), func(p *Process) { p.ExecOrigin = capture.OriginOtherCgroup }),
			debugInit("d", "debugger", bridgeB, capture.OriginContainerInit)},
		want: map[string]want{
			"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{vocab.FlagBridgeArgv}},
			"d":  {attr: vocab.AttributionAuditID, auditID: idB, flags: []string{vocab.FlagRootUnverified}},
		},
	}}, nil)
}

// plainRoot is an ID-less root exec'd into ns/web/app at d after t0.
func plainRoot(id string, d time.Duration, origin capture.Origin) Process {
	return with(pr(id, "runc-"+id, "", ""), func(p *Process) {
		p.Start, p.ExecTime, p.ExecOrigin = t0.Add(d), t0.Add(d), origin
	})
}

func TestJoinUncoveredExec(t *testing.T) {
	bridgeOn := func(c *Config) { c.BridgeCaptured = true }
	uncovered := []string{vocab.FlagUncoveredExec}
	alice := bridged(idA, bridgeA, "alice", t0)
	cases := []joinCase{
		{
			name:   "an exec no request explains: uncovered once the TTL has passed",
			procs:  []Process{plainRoot("x", time.Second, capture.OriginOtherCgroup)},
			expire: true,
			want:   map[string]want{"x": {flags: uncovered}},
		},
		{
			name:  "before the TTL it waits, unflagged",
			procs: []Process{plainRoot("x", time.Second, capture.OriginOtherCgroup)},
			want:  map[string]want{"x": {}},
		},
		{
			name:   "control: an unbridged request of its pod explains it (the heuristic)",
			recs:   []auditlog.ExecRecord{xr(idA)},
			procs:  []Process{plainRoot("x", time.Second, capture.OriginOtherCgroup)},
			expire: true,
			want:   map[string]want{"x": {attr: vocab.AttributionHeuristic, auditID: idA, minConf: 0.5}},
		},
		{
			name:   "with the bridge captured, a bridged request is its bridge root's, never an ID-less root's",
			recs:   []auditlog.ExecRecord{alice},
			procs:  []Process{broot("ra", bridgeA, time.Second), plainRoot("x", 2*time.Second, capture.OriginOtherCgroup)},
			expire: true,
			cfg:    bridgeOn,
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{vocab.FlagBridgeArgv}},
				"x":  {flags: uncovered},
			},
		},
		{
			name:   "with the bridge captured, before alice's root arrives the ID-less root still is not hers",
			recs:   []auditlog.ExecRecord{alice},
			procs:  []Process{plainRoot("x", 2*time.Second, capture.OriginOtherCgroup)},
			expire: true,
			cfg:    bridgeOn,
			want:   map[string]want{"x": {flags: uncovered}},
		},
		{
			name:   "control: the bridge's key not captured, a bridged request is the heuristic's",
			recs:   []auditlog.ExecRecord{alice},
			procs:  []Process{plainRoot("x", 2*time.Second, capture.OriginOtherCgroup)},
			expire: true,
			want:   map[string]want{"x": {attr: vocab.AttributionHeuristic, auditID: idA, minConf: 0.5}},
		},
		{
			name:   "a container's entrypoint is no exec: never uncovered",
			procs:  []Process{plainRoot("x", time.Second, capture.OriginContainerInit)},
			expire: true,
			want:   map[string]want{"x": {}},
		},
		{
			name:   "a process the container's own code started is no exec: never uncovered",
			procs:  []Process{plainRoot("x", time.Second, capture.OriginInside)},
			expire: true,
			want:   map[string]want{"x": {}},
		},
	}
	runJoinCases(t, cases, nil)
}

// TestUncoveredExecCounted: each uncovered exec is counted once, however
// often it is resolved again.
func TestUncoveredExecCounted(t *testing.T) {
	j := newJoiner(t)
	now := t0.Add(2 * time.Second)
	j.AddProcess(now, plainRoot("x", time.Second, capture.OriginOtherCgroup))
	j.AddProcess(now, plainRoot("y", time.Second, capture.OriginContainerInit))
	j.Expire(now.Add(DefaultPendingTTL))
	j.AddRecord(now.Add(DefaultPendingTTL), rwith(xr(idB), func(r *auditlog.ExecRecord) { r.Pod = "other" }))
	j.Expire(now.Add(2 * DefaultPendingTTL))
	if got := j.Stats().UncoveredExecs; got != 1 {
		t.Errorf("UncoveredExecs = %d, want 1 (x alone, once)", got)
	}
}
