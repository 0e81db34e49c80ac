package join

import (
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

type want struct {
	attr    vocab.Attribution
	auditID string
	// claimed is the ID an unattributed process only claims (or an env
	// forgery's value): never a session membership.
	claimed string
	flags   []string // exact, sorted
	cands   []string
	minConf float64 // heuristic only
}

func with(p Process, f func(*Process)) Process { f(&p); return p }

func rwith(r auditlog.ExecRecord, f func(*auditlog.ExecRecord)) auditlog.ExecRecord { f(&r); return r }

func inPod(ns, pod, ctr, cid string) func(*Process) {
	return func(p *Process) { p.Namespace, p.Pod, p.Container, p.ContainerID = ns, pod, ctr, cid }
}

func noMeta(cid string) func(*Process) {
	return func(p *Process) { p.Namespace, p.Pod, p.Container, p.ContainerID = "", "", "", cid }
}

func argv(a ...string) func(*Process) { return func(p *Process) { p.Argv = a } }

// joinCase is one table case: records and processes fed in both orders.
type joinCase struct {
	name   string
	recs   []auditlog.ExecRecord
	procs  []Process
	expire bool
	want   map[string]want
	// cfg tunes the joiner's config, when set.
	cfg func(*Config)
}

// spoofedA is bob's request under alice's ID idA, received as hers was.
var spoofedA = rwith(xr(idA), func(r *auditlog.ExecRecord) {
	r.User.Username = "bob"
	r.RequestURI += "&spoofed"
})

func TestJoinTable(t *testing.T) {
	bob := func(r *auditlog.ExecRecord) { r.User.Username = "bob" }
	cases := []joinCase{
		{
			name:  "verified root and descendants",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{pr("r", "runc", idA, vocab.SourceEnv), pr("c", "r", idA, vocab.SourceInherited), pr("g", "c", idA, vocab.SourceProcfs)},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA},
				"c": {attr: vocab.AttributionInherited, auditID: idA},
				"g": {attr: vocab.AttributionInherited, auditID: idA},
			},
		},
		{
			name: "env rewritten or removed stays with the kernel's ID",
			recs: []auditlog.ExecRecord{xr(idA), xr(idB)},
			procs: []Process{
				pr("r", "runc", idA, vocab.SourceEnv),
				with(pr("m", "r", idA, vocab.SourceInherited, vocab.FlagEnvMismatch), func(p *Process) { p.Captured.Claimed = idB }),
				pr("d", "r", idA, vocab.SourceInherited, vocab.FlagEnvRemoved),
			},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA},
				"m": {attr: vocab.AttributionInherited, auditID: idA, claimed: idB, flags: []string{vocab.FlagEnvMismatch}},
				"d": {attr: vocab.AttributionInherited, auditID: idA, flags: []string{vocab.FlagEnvRemoved}},
			},
		},
		{
			name: "forged root under a workload process is not attributed",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("init", "shim", "", ""), func(p *Process) { p.Start = t0.Add(-time.Hour) }),
				pr("f", "init", idA, vocab.SourceEnv, vocab.FlagRootUnverified),
				pr("fc", "f", idA, vocab.SourceInherited, vocab.FlagRootUnverified),
			},
			want: map[string]want{
				"init": {},
				"f":    {claimed: idA, flags: []string{vocab.FlagRootUnverified}},
				"fc":   {claimed: idA, flags: []string{vocab.FlagRootUnverified}},
			},
		},
		{
			name: "unverified root vouched by a parent in the same session (lost lineage)",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				pr("r", "runc", idA, vocab.SourceEnv),
				with(pr("u", "r", idA, vocab.SourceEnv, vocab.FlagRootUnverified, "lineage_full"), func(p *Process) { p.SessionRootID = "u" }),
				pr("uc", "u", idA, vocab.SourceInherited, vocab.FlagRootUnverified),
			},
			want: map[string]want{
				"r":  {attr: vocab.AttributionAuditID, auditID: idA},
				"u":  {attr: vocab.AttributionInherited, auditID: idA, flags: []string{"lineage_full", vocab.FlagRootUnverified}},
				"uc": {attr: vocab.AttributionInherited, auditID: idA, flags: []string{vocab.FlagRootUnverified}},
			},
		},
		{
			name: "ID replayed into another pod or container",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("p", "runc", idA, vocab.SourceEnv), inPod("ns", "db", "app", "ctr-db")),
				with(pr("c", "runc", idA, vocab.SourceEnv), inPod("ns", "web", "side", "ctr-side")),
				with(pr("n", "runc", idA, vocab.SourceEnv), inPod("other", "web", "app", "ctr-o")),
			},
			want: map[string]want{
				"p": {claimed: idA, flags: []string{vocab.FlagPodMismatch}},
				"c": {claimed: idA, flags: []string{vocab.FlagPodMismatch}},
				"n": {claimed: idA, flags: []string{vocab.FlagPodMismatch}},
			},
		},
		{
			name: "no pod metadata: the verified root fixes the container",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("r", "runc", idA, vocab.SourceEnv), noMeta("ctr-1")),
				with(pr("c", "r", idA, vocab.SourceInherited), noMeta("ctr-1")),
				with(pr("x", "y", idA, vocab.SourceInherited), noMeta("ctr-2")),
			},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA},
				"c": {attr: vocab.AttributionInherited, auditID: idA},
				"x": {claimed: idA, flags: []string{vocab.FlagPodMismatch}},
			},
		},
		{
			name: "no pod metadata and no root: an ID in two containers is not trusted",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("a", "x", idA, vocab.SourceProcfs), noMeta("ctr-1")),
				with(pr("b", "y", idA, vocab.SourceProcfs), noMeta("ctr-2")),
			},
			want: map[string]want{
				"a": {claimed: idA, flags: []string{vocab.FlagPodMismatch}},
				"b": {claimed: idA, flags: []string{vocab.FlagPodMismatch}},
			},
		},
		{
			name:  "record without container names the default one",
			recs:  []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) { r.Container = "" })},
			procs: []Process{pr("r", "runc", idA, vocab.SourceEnv)},
			want:  map[string]want{"r": {attr: vocab.AttributionAuditID, auditID: idA}},
		},
		{
			name: "denied, forbidden and failed requests",
			recs: []auditlog.ExecRecord{
				rwith(xr(idA), func(r *auditlog.ExecRecord) { r.Code = 403 }),
				rwith(xr(idB), func(r *auditlog.ExecRecord) { r.Code = 0; r.Decision = "forbid" }),
				rwith(xr(idC), func(r *auditlog.ExecRecord) { r.Code = 500 }),
			},
			procs: []Process{pr("a", "runc", idA, vocab.SourceEnv), pr("ac", "a", idA, vocab.SourceInherited), pr("b", "runc", idB, vocab.SourceEnv), pr("c", "runc", idC, vocab.SourceEnv)},
			want: map[string]want{
				"a":  {claimed: idA, flags: []string{vocab.FlagDeniedExec}},
				"ac": {claimed: idA, flags: []string{vocab.FlagDeniedExec}},
				"b":  {claimed: idB, flags: []string{vocab.FlagDeniedExec}},
				"c":  {claimed: idC, flags: []string{vocab.FlagFailedExec}},
			},
		},
		{
			name:   "orphan ID after the TTL",
			procs:  []Process{pr("r", "runc", idA, vocab.SourceEnv), pr("c", "r", idA, vocab.SourceInherited)},
			expire: true,
			want: map[string]want{
				"r": {claimed: idA, flags: []string{vocab.FlagNoAuditRecord}},
				"c": {claimed: idA, flags: []string{vocab.FlagNoAuditRecord}},
			},
		},
		{
			name:  "two requests share an ID",
			recs:  []auditlog.ExecRecord{xr(idA), spoofedA},
			procs: []Process{pr("r", "runc", idA, vocab.SourceEnv)},
			want: map[string]want{"r": {attr: vocab.AttributionAmbiguous, claimed: idA,
				cands: []string{idA, sessionKey(idA, &spoofedA, false)}, flags: []string{vocab.FlagAuditIDConflict}}},
		},
		{
			name:  "conflict flagged by the merger",
			recs:  []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) { r.Flags = []string{vocab.FlagAuditIDConflict} })},
			procs: []Process{pr("r", "runc", idA, vocab.SourceEnv)},
			want:  map[string]want{"r": {attr: vocab.AttributionAmbiguous, claimed: idA, cands: []string{idA}, flags: []string{vocab.FlagAuditIDConflict}}},
		},
		{
			name: "placeholder root matched by argv, children inherit the heuristic",
			recs: []auditlog.ExecRecord{xr(idA, "ls", "-la"), xr(idB, "bash")},
			procs: []Process{
				with(pr("r", "runc", vocab.PlaceholderID, vocab.SourceEnv, vocab.FlagPlaceholder), argv("ls", "-la")),
				pr("c", "r", vocab.PlaceholderID, vocab.SourceInherited, vocab.FlagPlaceholder),
			},
			want: map[string]want{
				"r": {attr: vocab.AttributionHeuristic, auditID: idA, flags: []string{vocab.FlagPlaceholder}, minConf: 0.8},
				"c": {attr: vocab.AttributionHeuristic, auditID: idA, flags: []string{vocab.FlagPlaceholder}, minConf: 0.8},
			},
		},
		{
			name:  "two overlapping sessions with the same command",
			recs:  []auditlog.ExecRecord{xr(idA, "bash"), rwith(xr(idB, "bash"), bob)},
			procs: []Process{with(pr("r", "runc", "", ""), argv("bash")), with(pr("c", "r", "", ""), argv("id"))},
			want: map[string]want{
				"r": {attr: vocab.AttributionAmbiguous, cands: []string{idA, idB}},
				"c": {attr: vocab.AttributionAmbiguous, cands: []string{idA, idB}},
			},
		},
		{
			name:  "an exact argv beats a same-program match",
			recs:  []auditlog.ExecRecord{xr(idA, "cat", "/etc/passwd"), rwith(xr(idB, "cat", "/etc/hosts"), bob)},
			procs: []Process{with(pr("r", "runc", "", ""), argv("cat", "/etc/hosts"))},
			want:  map[string]want{"r": {attr: vocab.AttributionHeuristic, auditID: idB, minConf: 0.5}},
		},
		{
			name:  "a session with a verified root is not a heuristic candidate",
			recs:  []auditlog.ExecRecord{xr(idA, "sh"), rwith(xr(idB, "sh"), bob)},
			procs: []Process{pr("v", "runc", idA, vocab.SourceEnv), pr("r", "runc2", "", "")},
			want: map[string]want{
				"v": {attr: vocab.AttributionAuditID, auditID: idA},
				"r": {attr: vocab.AttributionHeuristic, auditID: idB, minConf: 0.8},
			},
		},
		{
			name: "outside the window, another program, or a host process",
			recs: []auditlog.ExecRecord{xr(idA, "sh")},
			procs: []Process{
				with(pr("early", "runc", "", ""), func(p *Process) { p.Start = t0.Add(-time.Hour) }),
				with(pr("other", "runc", "", ""), func(p *Process) { p.Argv, p.Filename = []string{"nginx"}, "/usr/sbin/nginx" }),
				with(pr("host", "systemd", "", ""), noMeta("")),
			},
			want: map[string]want{"early": {}, "other": {}, "host": {}},
		},
		{
			name: "SPO request UID joins through the webhook's audit annotation",
			recs: []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) {
				r.Annotations = map[string]string{"execmetadata.spo.io/" + vocab.SPOKey: "spo-1"}
			})},
			procs: []Process{
				with(pr("r", "runc", "", ""), func(p *Process) { p.SPO = capture.KeyValue{Value: "spo-1", Source: vocab.SourceEnv} }),
				with(pr("c", "r", "", ""), func(p *Process) { p.SPO = capture.KeyValue{Value: "spo-1", Source: vocab.SourceInherited} }),
			},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA},
				"c": {attr: vocab.AttributionInherited, auditID: idA},
			},
		},
		{
			name: "SPO root set by the runtime's first program is attributed, and says so",
			recs: []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) {
				r.Annotations = map[string]string{"execmetadata.spo.io/" + vocab.SPOKey: "spo-2"}
			})},
			procs: []Process{
				with(pr("r", "runc", "", ""), func(p *Process) {
					p.SPO = capture.KeyValue{Value: "spo-2", Source: vocab.SourceEnv, Flags: []string{vocab.FlagRootUnverified, vocab.FlagRootIndirect}}
				}),
				with(pr("c", "r", "", ""), func(p *Process) {
					p.SPO = capture.KeyValue{Value: "spo-2", Source: vocab.SourceInherited, Flags: []string{vocab.FlagRootUnverified, vocab.FlagRootIndirect}}
				}),
			},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA, flags: []string{vocab.FlagRootIndirect, vocab.FlagRootUnverified}},
				"c": {attr: vocab.AttributionInherited, auditID: idA, flags: []string{vocab.FlagRootIndirect, vocab.FlagRootUnverified}},
			},
		},
		{
			name: "SPO root set by the container's own code is only a claim",
			recs: []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) {
				r.Annotations = map[string]string{"execmetadata.spo.io/" + vocab.SPOKey: "spo-3"}
			})},
			procs: []Process{
				with(pr("r", "runc", "", ""), func(p *Process) {
					p.SPO = capture.KeyValue{Value: "spo-3", Source: vocab.SourceEnv, Flags: []string{vocab.FlagRootUnverified}}
				}),
			},
			want: map[string]want{"r": {claimed: idA, flags: []string{vocab.FlagRootUnverified}}},
		},
		{
			name:  "an audit ID root set by the runtime's first program is only a claim",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{pr("r", "runc", idA, vocab.SourceEnv, vocab.FlagRootUnverified, vocab.FlagRootIndirect)},
			want:  map[string]want{"r": {claimed: idA, flags: []string{vocab.FlagRootIndirect, vocab.FlagRootUnverified}}},
		},
		{
			name:   "SPO UID with no record is an orphan",
			procs:  []Process{with(pr("r", "runc", "", ""), func(p *Process) { p.SPO = capture.KeyValue{Value: "spo-9", Source: vocab.SourceEnv} })},
			expire: true,
			want:   map[string]want{"r": {flags: []string{vocab.FlagNoAuditRecord}}},
		},
		{
			name:  "nonstandard IDs are opaque keys",
			recs:  []auditlog.ExecRecord{xr("my-request-1")},
			procs: []Process{pr("r", "runc", "my-request-1", vocab.SourceEnv, vocab.FlagNonstandardID)},
			want:  map[string]want{"r": {attr: vocab.AttributionAuditID, auditID: "my-request-1", flags: []string{vocab.FlagNonstandardID}}},
		},
		{
			name:  "a child that lost its lineage inherits from its parent",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{pr("r", "runc", idA, vocab.SourceEnv), pr("c", "r", "", "", "lineage_full")},
			want: map[string]want{
				"r": {attr: vocab.AttributionAuditID, auditID: idA},
				"c": {attr: vocab.AttributionInherited, auditID: idA, flags: []string{"lineage_full"}},
			},
		},
	}
	runJoinCases(t, cases, nil)
}

// runJoinCases feeds each case's records before and after its processes (and
// past the pending TTL if asked), checks every wanted process, then hands
// the final rows to also, when given.
func runJoinCases(t *testing.T, cases []joinCase, also func(*testing.T, joinCase, *snapshot)) {
	t.Helper()
	for _, tc := range cases {
		for _, recordsFirst := range []bool{false, true} {
			name := tc.name + map[bool]string{false: "/processes first", true: "/records first"}[recordsFirst]
			t.Run(name, func(t *testing.T) {
				var mods []func(*Config)
				if tc.cfg != nil {
					mods = append(mods, tc.cfg)
				}
				j := newJoiner(t, mods...)
				snap := newSnapshot()
				now := t0.Add(2 * time.Second)
				addRecs := func() {
					for _, r := range tc.recs {
						snap.apply(j.AddRecord(now, r))
					}
				}
				if recordsFirst {
					addRecs()
				}
				for _, p := range tc.procs {
					snap.apply(j.AddProcess(now, p))
				}
				if !recordsFirst {
					addRecs()
				}
				for id, got := range snap.procs {
					if got.Attribution == vocab.AttributionHeuristic {
						t.Fatalf("%s: heuristic answer %s before its window closed", id, got.AuditID)
					}
				}
				// Every root's window and every hold closes, well inside
				// the pending TTL.
				snap.apply(j.Expire(windowsClosed(now)))
				if tc.expire {
					snap.apply(j.Expire(now.Add(DefaultPendingTTL)))
				}
				for id, w := range tc.want {
					got, ok := snap.procs[id]
					if !ok {
						t.Fatalf("%s: no update emitted", id)
					}
					checkWant(t, id, got, w)
				}
				if also != nil {
					also(t, tc, snap)
				}
			})
		}
	}
}

func checkWant(t *testing.T, id string, got Process, w want) {
	t.Helper()
	flags := w.flags
	if flags == nil {
		flags = []string{}
	}
	if got.Attribution != w.attr || got.AuditID != w.auditID || got.ClaimedAuditID != w.claimed ||
		!slices.Equal(got.Flags, flags) || !slices.Equal(got.Candidates, w.cands) {
		t.Errorf("%s: got attr=%q auditID=%q claimed=%q flags=%v cands=%v, want attr=%q auditID=%q claimed=%q flags=%v cands=%v",
			id, got.Attribution, got.AuditID, got.ClaimedAuditID, got.Flags, got.Candidates,
			w.attr, w.auditID, w.claimed, flags, w.cands)
	}
	switch {
	case got.Attribution == vocab.AttributionHeuristic && (got.Confidence < w.minConf || got.Confidence > maxConfidence):
		t.Errorf("%s: confidence %.3f not in [%.2f, %.2f]", id, got.Confidence, w.minConf, maxConfidence)
	case got.Attribution != vocab.AttributionHeuristic && got.Confidence != 0:
		t.Errorf("%s: confidence %.3f on a %q attribution", id, got.Confidence, got.Attribution)
	}
}
