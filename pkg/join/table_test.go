package join

import (
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
)

type want struct {
	attr    Attribution
	auditID string
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

func TestJoinTable(t *testing.T) {
	bob := func(r *auditlog.ExecRecord) { r.User.Username = "bob" }
	cases := []struct {
		name   string
		recs   []auditlog.ExecRecord
		procs  []Process
		expire bool
		want   map[string]want
	}{
		{
			name:  "verified root and descendants",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{pr("r", "runc", idA, SourceEnv), pr("c", "r", idA, SourceInherited), pr("g", "c", idA, SourceProcfs)},
			want: map[string]want{
				"r": {attr: AttributionAuditID, auditID: idA},
				"c": {attr: AttributionInherited, auditID: idA},
				"g": {attr: AttributionInherited, auditID: idA},
			},
		},
		{
			name: "env rewritten or removed stays with the kernel's ID",
			recs: []auditlog.ExecRecord{xr(idA), xr(idB)},
			procs: []Process{
				pr("r", "runc", idA, SourceEnv),
				with(pr("m", "r", idA, SourceInherited, FlagEnvMismatch), func(p *Process) { p.ClaimedAuditID = idB }),
				pr("d", "r", idA, SourceInherited, FlagEnvRemoved),
			},
			want: map[string]want{
				"r": {attr: AttributionAuditID, auditID: idA},
				"m": {attr: AttributionInherited, auditID: idA, flags: []string{FlagEnvMismatch}},
				"d": {attr: AttributionInherited, auditID: idA, flags: []string{FlagEnvRemoved}},
			},
		},
		{
			name: "forged root under a workload process is not attributed",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("init", "shim", "", ""), func(p *Process) { p.Start = t0.Add(-time.Hour) }),
				pr("f", "init", idA, SourceEnv, FlagRootUnverified),
				pr("fc", "f", idA, SourceInherited, FlagRootUnverified),
			},
			want: map[string]want{
				"init": {},
				"f":    {auditID: idA, flags: []string{FlagRootUnverified}},
				"fc":   {auditID: idA, flags: []string{FlagRootUnverified}},
			},
		},
		{
			name: "unverified root vouched by a parent in the same session (lost lineage)",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				pr("r", "runc", idA, SourceEnv),
				with(pr("u", "r", idA, SourceEnv, FlagRootUnverified, "lineage_full"), func(p *Process) { p.SessionRootID = "u" }),
				pr("uc", "u", idA, SourceInherited, FlagRootUnverified),
			},
			want: map[string]want{
				"r":  {attr: AttributionAuditID, auditID: idA},
				"u":  {attr: AttributionInherited, auditID: idA, flags: []string{"lineage_full", FlagRootUnverified}},
				"uc": {attr: AttributionInherited, auditID: idA, flags: []string{FlagRootUnverified}},
			},
		},
		{
			name: "ID replayed into another pod or container",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("p", "runc", idA, SourceEnv), inPod("ns", "db", "app", "ctr-db")),
				with(pr("c", "runc", idA, SourceEnv), inPod("ns", "web", "side", "ctr-side")),
				with(pr("n", "runc", idA, SourceEnv), inPod("other", "web", "app", "ctr-o")),
			},
			want: map[string]want{
				"p": {auditID: idA, flags: []string{FlagPodMismatch}},
				"c": {auditID: idA, flags: []string{FlagPodMismatch}},
				"n": {auditID: idA, flags: []string{FlagPodMismatch}},
			},
		},
		{
			name: "no pod metadata: the verified root fixes the container",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("r", "runc", idA, SourceEnv), noMeta("ctr-1")),
				with(pr("c", "r", idA, SourceInherited), noMeta("ctr-1")),
				with(pr("x", "y", idA, SourceInherited), noMeta("ctr-2")),
			},
			want: map[string]want{
				"r": {attr: AttributionAuditID, auditID: idA},
				"c": {attr: AttributionInherited, auditID: idA},
				"x": {auditID: idA, flags: []string{FlagPodMismatch}},
			},
		},
		{
			name: "no pod metadata and no root: an ID in two containers is not trusted",
			recs: []auditlog.ExecRecord{xr(idA)},
			procs: []Process{
				with(pr("a", "x", idA, SourceProcfs), noMeta("ctr-1")),
				with(pr("b", "y", idA, SourceProcfs), noMeta("ctr-2")),
			},
			want: map[string]want{
				"a": {auditID: idA, flags: []string{FlagPodMismatch}},
				"b": {auditID: idA, flags: []string{FlagPodMismatch}},
			},
		},
		{
			name:  "record without container names the default one",
			recs:  []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) { r.Container = "" })},
			procs: []Process{pr("r", "runc", idA, SourceEnv)},
			want:  map[string]want{"r": {attr: AttributionAuditID, auditID: idA}},
		},
		{
			name: "denied, forbidden and failed requests",
			recs: []auditlog.ExecRecord{
				rwith(xr(idA), func(r *auditlog.ExecRecord) { r.Code = 403 }),
				rwith(xr(idB), func(r *auditlog.ExecRecord) { r.Code = 0; r.Decision = "forbid" }),
				rwith(xr(idC), func(r *auditlog.ExecRecord) { r.Code = 500 }),
			},
			procs: []Process{pr("a", "runc", idA, SourceEnv), pr("ac", "a", idA, SourceInherited), pr("b", "runc", idB, SourceEnv), pr("c", "runc", idC, SourceEnv)},
			want: map[string]want{
				"a":  {auditID: idA, flags: []string{FlagDeniedExec}},
				"ac": {auditID: idA, flags: []string{FlagDeniedExec}},
				"b":  {auditID: idB, flags: []string{FlagDeniedExec}},
				"c":  {auditID: idC, flags: []string{FlagFailedExec}},
			},
		},
		{
			name:   "orphan ID after the TTL",
			procs:  []Process{pr("r", "runc", idA, SourceEnv), pr("c", "r", idA, SourceInherited)},
			expire: true,
			want: map[string]want{
				"r": {auditID: idA, flags: []string{FlagNoAuditRecord}},
				"c": {auditID: idA, flags: []string{FlagNoAuditRecord}},
			},
		},
		{
			name: "two requests share an ID",
			recs: []auditlog.ExecRecord{xr(idA), rwith(xr(idA), func(r *auditlog.ExecRecord) {
				bob(r)
				r.RequestURI += "&spoofed"
			})},
			procs: []Process{pr("r", "runc", idA, SourceEnv)},
			want:  map[string]want{"r": {attr: AttributionAmbiguous, auditID: idA, cands: []string{idA}, flags: []string{FlagAuditIDConflict}}},
		},
		{
			name:  "conflict flagged by the merger",
			recs:  []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) { r.Flags = []string{auditlog.FlagAuditIDConflict} })},
			procs: []Process{pr("r", "runc", idA, SourceEnv)},
			want:  map[string]want{"r": {attr: AttributionAmbiguous, auditID: idA, cands: []string{idA}, flags: []string{FlagAuditIDConflict}}},
		},
		{
			name: "placeholder root matched by argv, children inherit the heuristic",
			recs: []auditlog.ExecRecord{xr(idA, "ls", "-la"), xr(idB, "bash")},
			procs: []Process{
				with(pr("r", "runc", PlaceholderID, SourceEnv, FlagPlaceholder), argv("ls", "-la")),
				pr("c", "r", PlaceholderID, SourceInherited, FlagPlaceholder),
			},
			want: map[string]want{
				"r": {attr: AttributionHeuristic, auditID: idA, flags: []string{FlagPlaceholder}, minConf: 0.8},
				"c": {attr: AttributionHeuristic, auditID: idA, flags: []string{FlagPlaceholder}, minConf: 0.8},
			},
		},
		{
			name:  "two overlapping sessions with the same command",
			recs:  []auditlog.ExecRecord{xr(idA, "bash"), rwith(xr(idB, "bash"), bob)},
			procs: []Process{with(pr("r", "runc", "", ""), argv("bash")), with(pr("c", "r", "", ""), argv("id"))},
			want: map[string]want{
				"r": {attr: AttributionAmbiguous, cands: []string{idA, idB}},
				"c": {attr: AttributionAmbiguous, cands: []string{idA, idB}},
			},
		},
		{
			name:  "an exact argv beats a same-program match",
			recs:  []auditlog.ExecRecord{xr(idA, "cat", "/etc/passwd"), rwith(xr(idB, "cat", "/etc/hosts"), bob)},
			procs: []Process{with(pr("r", "runc", "", ""), argv("cat", "/etc/hosts"))},
			want:  map[string]want{"r": {attr: AttributionHeuristic, auditID: idB, minConf: 0.5}},
		},
		{
			name:  "a session with a verified root is not a heuristic candidate",
			recs:  []auditlog.ExecRecord{xr(idA, "sh"), rwith(xr(idB, "sh"), bob)},
			procs: []Process{pr("v", "runc", idA, SourceEnv), pr("r", "runc2", "", "")},
			want: map[string]want{
				"v": {attr: AttributionAuditID, auditID: idA},
				"r": {attr: AttributionHeuristic, auditID: idB, minConf: 0.8},
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
				r.Annotations = map[string]string{"execmetadata.spo.io/" + SPOKey: "spo-1"}
			})},
			procs: []Process{
				with(pr("r", "runc", "", ""), func(p *Process) { p.SPO = KeyValue{Value: "spo-1", Source: SourceEnv} }),
				with(pr("c", "r", "", ""), func(p *Process) { p.SPO = KeyValue{Value: "spo-1", Source: SourceInherited} }),
			},
			want: map[string]want{
				"r": {attr: AttributionAuditID, auditID: idA},
				"c": {attr: AttributionInherited, auditID: idA},
			},
		},
		{
			name: "SPO root set by the runtime's first program is attributed, and says so",
			recs: []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) {
				r.Annotations = map[string]string{"execmetadata.spo.io/" + SPOKey: "spo-2"}
			})},
			procs: []Process{
				with(pr("r", "runc", "", ""), func(p *Process) {
					p.SPO = KeyValue{Value: "spo-2", Source: SourceEnv, Flags: []string{FlagRootUnverified, FlagRootIndirect}}
				}),
				with(pr("c", "r", "", ""), func(p *Process) {
					p.SPO = KeyValue{Value: "spo-2", Source: SourceInherited, Flags: []string{FlagRootUnverified, FlagRootIndirect}}
				}),
			},
			want: map[string]want{
				"r": {attr: AttributionAuditID, auditID: idA, flags: []string{FlagRootIndirect, FlagRootUnverified}},
				"c": {attr: AttributionInherited, auditID: idA, flags: []string{FlagRootIndirect, FlagRootUnverified}},
			},
		},
		{
			name: "SPO root set by the container's own code is only a claim",
			recs: []auditlog.ExecRecord{rwith(xr(idA), func(r *auditlog.ExecRecord) {
				r.Annotations = map[string]string{"execmetadata.spo.io/" + SPOKey: "spo-3"}
			})},
			procs: []Process{
				with(pr("r", "runc", "", ""), func(p *Process) {
					p.SPO = KeyValue{Value: "spo-3", Source: SourceEnv, Flags: []string{FlagRootUnverified}}
				}),
			},
			want: map[string]want{"r": {auditID: idA, flags: []string{FlagRootUnverified}}},
		},
		{
			name:  "an audit ID root set by the runtime's first program is only a claim",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{pr("r", "runc", idA, SourceEnv, FlagRootUnverified, FlagRootIndirect)},
			want:  map[string]want{"r": {auditID: idA, flags: []string{FlagRootIndirect, FlagRootUnverified}}},
		},
		{
			name:   "SPO UID with no record is an orphan",
			procs:  []Process{with(pr("r", "runc", "", ""), func(p *Process) { p.SPO = KeyValue{Value: "spo-9", Source: SourceEnv} })},
			expire: true,
			want:   map[string]want{"r": {flags: []string{FlagNoAuditRecord}}},
		},
		{
			name:  "nonstandard IDs are opaque keys",
			recs:  []auditlog.ExecRecord{xr("my-request-1")},
			procs: []Process{pr("r", "runc", "my-request-1", SourceEnv, FlagNonstandardID)},
			want:  map[string]want{"r": {attr: AttributionAuditID, auditID: "my-request-1", flags: []string{FlagNonstandardID}}},
		},
		{
			name:  "a child that lost its lineage inherits from its parent",
			recs:  []auditlog.ExecRecord{xr(idA)},
			procs: []Process{pr("r", "runc", idA, SourceEnv), pr("c", "r", "", "", "lineage_full")},
			want: map[string]want{
				"r": {attr: AttributionAuditID, auditID: idA},
				"c": {attr: AttributionInherited, auditID: idA, flags: []string{"lineage_full"}},
			},
		},
	}
	for _, tc := range cases {
		for _, recordsFirst := range []bool{false, true} {
			name := tc.name + map[bool]string{false: "/processes first", true: "/records first"}[recordsFirst]
			t.Run(name, func(t *testing.T) {
				j := newJoiner(t)
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
			})
		}
	}
}

func checkWant(t *testing.T, id string, got AttributedProcess, w want) {
	t.Helper()
	flags := w.flags
	if flags == nil {
		flags = []string{}
	}
	if got.Attribution != w.attr || got.AuditID != w.auditID || !slices.Equal(got.Flags, flags) ||
		!slices.Equal(got.Candidates, w.cands) {
		t.Errorf("%s: got attr=%q auditID=%q flags=%v cands=%v, want attr=%q auditID=%q flags=%v cands=%v",
			id, got.Attribution, got.AuditID, got.Flags, got.Candidates, w.attr, w.auditID, flags, w.cands)
	}
	switch {
	case got.Attribution == AttributionHeuristic && (got.Confidence < w.minConf || got.Confidence > maxConfidence):
		t.Errorf("%s: confidence %.3f not in [%.2f, %.2f]", id, got.Confidence, w.minConf, maxConfidence)
	case got.Attribution != AttributionHeuristic && got.Confidence != 0:
		t.Errorf("%s: confidence %.3f on a %q attribution", id, got.Confidence, got.Attribution)
	}
}
