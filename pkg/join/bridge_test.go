package join

import (
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// The exec bridge: no KEP-6035 anywhere, each exec rewritten to `env
// CORRELATOR_EXEC_ID=<fresh id> <command>` and its audit event annotated
// with that id. The kernel takes a runtime-exec'd root's id from that argv.

const (
	bridgeA = "7f1c0d2e-0000-4000-8000-0000000000a1"
	bridgeB = "7f1c0d2e-0000-4000-8000-0000000000b2"
)

// bridged is xr(id) annotated by the bridge with bridge ID b, by user.
func bridged(id, b, user string, rr time.Time) auditlog.ExecRecord {
	return rwith(xr(id), func(r *auditlog.ExecRecord) {
		r.User.Username = user
		r.RequestReceivedTimestamp = rr
		r.Annotations = map[string]string{auditlog.AnnotationDecision: "allow", vocab.BridgeWebhookName + "/" + vocab.BridgeKey: b}
	})
}

// broot is a root the runtime exec'd as the bridge wrote it, started at
// d after t0; bchild is a child of it.
func broot(id, b string, d time.Duration, flags ...string) Process {
	return with(pr(id, "runc-"+id, "", ""), func(p *Process) {
		p.Argv, p.Start, p.ExecTime, p.SessionRootID = []string{"env", vocab.BridgeKey + "=" + b, "sh"}, t0.Add(d), t0.Add(d), id
		p.Bridge = capture.KeyValue{Value: b, Source: vocab.SourceEnv, Flags: append([]string{vocab.FlagBridgeArgv}, flags...)}
	})
}

func bchild(id, root, b string) Process {
	return with(pr(id, root, "", ""), func(p *Process) {
		p.Argv, p.SessionRootID, p.Start = []string{"id"}, root, t0.Add(5*time.Second)
		p.Bridge = capture.KeyValue{Value: b, Source: vocab.SourceInherited}
	})
}

func TestJoinBridge(t *testing.T) {
	argvFlag := []string{vocab.FlagBridgeArgv}
	alice, bob := bridged(idA, bridgeA, "alice", t0), bridged(idB, bridgeB, "bob", t0.Add(500*time.Millisecond))
	cases := []joinCase{
		{
			name:  "two users' overlapping sessions into one container: each exact",
			recs:  []auditlog.ExecRecord{alice, bob},
			procs: []Process{broot("ra", bridgeA, time.Second), bchild("ca", "ra", bridgeA), broot("rb", bridgeB, 1200*time.Millisecond), bchild("cb", "rb", bridgeB)},
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: argvFlag},
				"ca": {attr: vocab.AttributionInherited, auditID: idA},
				"rb": {attr: vocab.AttributionAuditID, auditID: idB, flags: argvFlag},
				"cb": {attr: vocab.AttributionInherited, auditID: idB},
			},
		},
		{
			name:  "the merger saw another request reuse alice's audit ID, not held yet: her bridge ID still names her request",
			recs:  []auditlog.ExecRecord{rwith(alice, func(r *auditlog.ExecRecord) { r.Flags = []string{vocab.FlagAuditIDConflict} })},
			procs: []Process{broot("ra", bridgeA, time.Second), bchild("ca", "ra", bridgeA)},
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{vocab.FlagAuditIDConflict, vocab.FlagBridgeArgv}},
				"ca": {attr: vocab.AttributionInherited, auditID: idA, flags: []string{vocab.FlagAuditIDConflict}},
			},
		},
		{
			name: "control: the same sessions without the bridge are the heuristic's, ambiguous",
			recs: []auditlog.ExecRecord{alice, bob},
			procs: []Process{with(pr("ra", "runc-a", "", ""), func(p *Process) { p.Start = t0.Add(time.Second) }),
				with(pr("rb", "runc-b", "", ""), func(p *Process) { p.Start = t0.Add(1200 * time.Millisecond) })},
			want: map[string]want{
				"ra": {attr: vocab.AttributionAmbiguous, cands: []string{idB, idA}},
				"rb": {attr: vocab.AttributionAmbiguous, cands: []string{idB, idA}},
			},
		},
		{
			name: "the bridge's env execs the command in place: still the root",
			recs: []auditlog.ExecRecord{alice},
			procs: []Process{broot("ra", bridgeA, time.Second), with(broot("ra", bridgeA, time.Second), func(p *Process) {
				p.Argv, p.ExecTime = []string{"sh"}, t0.Add(1100*time.Millisecond)
				p.Bridge = capture.KeyValue{Value: bridgeA, Source: vocab.SourceInherited}
			})},
			want: map[string]want{"ra": {attr: vocab.AttributionAuditID, auditID: idA}},
		},
		{
			name: "env KEY=<stolen> run by code inside the container is a claim",
			recs: []auditlog.ExecRecord{alice},
			procs: []Process{broot("ra", bridgeA, time.Second),
				with(broot("f", bridgeA, 3*time.Second, vocab.FlagRootUnverified), func(p *Process) { p.ParentProcessID = "init" })},
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: argvFlag},
				"f":  {claimed: idA, flags: []string{vocab.FlagBridgeArgv, vocab.FlagRootUnverified}},
			},
		},
		{
			name:  "an exec that bypassed admission, mimicking the bridge with a copied id: never attributed",
			recs:  []auditlog.ExecRecord{alice},
			procs: []Process{broot("ra", bridgeA, time.Second), broot("rx", bridgeA, 8*time.Second)},
			want: map[string]want{
				"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: argvFlag},
				"rx": {claimed: idA, flags: []string{vocab.FlagAuditIDReused, vocab.FlagBridgeArgv}},
			},
		},
		{
			name:   "no annotated record: waits, then no_audit_record",
			procs:  []Process{broot("ra", bridgeA, time.Second)},
			expire: true,
			want:   map[string]want{"ra": {flags: []string{vocab.FlagBridgeArgv, vocab.FlagNoAuditRecord}}},
		},
		{
			name: "KEP-6035's injected ID wins over the bridge's",
			recs: []auditlog.ExecRecord{xr(idA), bridged(idB, bridgeA, "bob", t0)},
			procs: []Process{with(broot("ra", bridgeA, time.Second), func(p *Process) {
				p.Captured = capture.KeyValue{Value: idA, Source: vocab.SourceEnv}
			})},
			want: map[string]want{"ra": {attr: vocab.AttributionAuditID, auditID: idA, flags: argvFlag}},
		},
	}
	runJoinCases(t, cases, nil)
}
