package elasticsearch

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestUpgradeCluster runs the mapping upgrade against the real cluster.
func TestUpgradeCluster(t *testing.T) {
	testUpgrade(t, clusterConfig(t))
}

// testUpgrade finds the sessions and processes indices as version 3 left
// them (created with testdata/v3-mappings.json: strict, without url and
// the correlator fields added since) and checks that Open brings them up
// to date: a document with the new fields, refused before, is stored and
// reads back whole after; a document stored before still reads back; and
// the indices stay strict.
func testUpgrade(t *testing.T, cfg Config) {
	ctx := context.Background()
	cfg = cfg.withDefaults()
	c, err := dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := namesFor(cfg.IndexPrefix, 0)
	raw, err := os.ReadFile("testdata/v3-mappings.json")
	if err != nil {
		t.Fatal(err)
	}
	// Version 3 typed command lines as wildcard, which a cluster without
	// x-pack's wildcard module (Elastic's test distribution) lacks.
	if ft, err := c.probeTypes(ctx); err != nil {
		t.Fatal(err)
	} else if ft.cmdline["type"] != "wildcard" {
		raw = []byte(strings.ReplaceAll(string(raw), `"wildcard"`, `"keyword"`))
	}
	var v3 struct{ Sessions, Processes map[string]any }
	if err := json.Unmarshal(raw, &v3); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]map[string]any{n.legacy(kindSessions): v3.Sessions, n.legacy(kindProcesses): v3.Processes} {
		if err := c.put(ctx, "/"+name, map[string]any{"mappings": m}, ""); err != nil {
			t.Fatalf("creating %s with the v3 mapping: %v", name, err)
		}
	}

	t0 := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	oldSession := join.Session{ExecRecord: auditlog.ExecRecord{AuditID: "old", User: auditlog.UserInfo{Username: "alice"},
		Namespace: "default", Pod: "web-0", RequestReceivedTimestamp: t0, Stages: []string{"ResponseComplete"}}, UpdatedAt: t0}
	newSession := oldSession
	newSession.AuditID, newSession.RequestReceivedTimestamp = "new", t0.Add(time.Minute)
	newSession.RequestURI = "/api/v1/namespaces/default/pods/web-0/exec?command=sh"
	newSession.Ports = []string{"8080"}
	newSession.Annotations = map[string]string{"authorization.k8s.io/decision": "allow"}
	newSession.SPOExecRequestUID = "spo-1"
	newSession.Conflicts = []auditlog.ExecRecord{{AuditID: "new", User: auditlog.UserInfo{Username: "mallory"},
		Stages: []string{"RequestReceived"}, RequestReceivedTimestamp: t0}}
	newProcess := join.Process{Exec: capture.Exec{ProcessID: "p-new", PID: 7, Filename: "/bin/sh",
		Argv: []string{"sh"}, ArgvTruncated: true}, Namespace: "default", Pod: "web-0",
		Start: t0.Add(time.Minute + time.Second), ExecTime: t0.Add(time.Minute + 2*time.Second),
		AuditID: "new", Attribution: vocab.AttributionAuditID, SPOExecRequestUID: "spo-1", Flags: []string{},
		RecordDelay: 2.5, Captured: capture.KeyValue{Value: "new", Source: vocab.SourceEnv}, ExecOrigin: capture.OriginInside,
		PendingUntil: t0.Add(2 * time.Minute)}

	// Before the upgrade the strict v3 mapping refuses the new fields: the
	// data loss this guards against. Version 3's own documents go in.
	m := newBulkMetrics(nil, "items", "requests")
	sessionOp := func(ss *join.Session) op {
		return op{index: n.legacy(kindSessions), action: "index", id: ss.AuditID, what: "session " + ss.AuditID,
			body: mustJSON(sessionToDoc(ss, t0))}
	}
	processOp := func(p *join.Process) op {
		return op{index: n.legacy(kindProcesses), action: "index", id: p.ProcessID, what: "process " + p.ProcessID,
			body: mustJSON(processToDoc(p))}
	}
	err = c.bulk(ctx, m, []op{sessionOp(&newSession), processOp(&newProcess)})
	if err == nil || !strings.Contains(err.Error(), "2 of 2 refused") || !strings.Contains(err.Error(), "strict_dynamic_mapping_exception") {
		t.Fatalf("new fields under the v3 mapping: %v, want both refused by the strict mapping", err)
	}
	oldProcess := newProcess
	oldProcess.ProcessID, oldProcess.AuditID, oldProcess.Start = "p-old", "old", t0.Add(time.Second)
	oldProcess.SPOExecRequestUID, oldProcess.ArgvTruncated, oldProcess.ExecTime = "", false, time.Time{}
	oldProcess.RecordDelay, oldProcess.Captured, oldProcess.ExecOrigin = 0, capture.KeyValue{}, ""
	oldProcess.PendingUntil = time.Time{}
	if err := c.bulk(ctx, m, []op{sessionOp(&oldSession), processOp(&oldProcess)}); err != nil {
		t.Fatalf("writing a v3 session and process: %v", err)
	}

	s, err := Open(ctx, cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("Open over v3 indices: %v", err)
	}
	if err := s.Write(ctx, store.Batch{Sessions: []join.Session{newSession}, Processes: []join.Process{newProcess}}); err != nil {
		t.Fatalf("writing the new fields after Open: %v", err)
	}
	d, err := s.GetSession(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	want := newSession
	want.ProcessCount, want.FirstProcess, want.LastProcess = 1, newProcess.Start, newProcess.Start
	sameJSON(t, "session with the new fields", d.Session, want)
	sameJSON(t, "process with the new fields", d.Processes, []join.Process{newProcess})
	if p := d.Processes[0]; !reflect.DeepEqual(p.Captured, newProcess.Captured) || p.ExecOrigin != newProcess.ExecOrigin {
		t.Errorf("process's evidence read back %+v, %q; want %+v, %q", p.Captured, p.ExecOrigin, newProcess.Captured, newProcess.ExecOrigin)
	}
	d, err = s.GetSession(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	wantOld := oldSession
	wantOld.ProcessCount, wantOld.FirstProcess, wantOld.LastProcess = 1, oldProcess.Start, oldProcess.Start
	sameJSON(t, "session stored before the upgrade", d.Session, wantOld)

	// The upgrade added fields; it did not loosen the mapping.
	for _, index := range []string{n.legacy(kindSessions), n.legacy(kindProcesses)} {
		err := c.bulk(ctx, m, []op{{index: index, action: "index", id: "x", what: "stray", body: []byte(`{"stray":1}`)}})
		if err == nil || !strings.Contains(err.Error(), "strict_dynamic_mapping_exception") {
			t.Errorf("unmapped field in %s after the upgrade: %v, want strict_dynamic_mapping_exception", index, err)
		}
	}

	// The first retention pass moves the single indices into period
	// indices and deletes them: everything they held reads back the same.
	// A cut at the epoch drops nothing else.
	if d, err := s.DeleteOlderThan(ctx, time.Unix(0, 0)); err != nil || d != (store.Deleted{}) {
		t.Fatalf("first pass after the upgrade = %+v, %v", d, err)
	}
	for _, k := range []kind{kindSessions, kindProcesses} {
		var rows []map[string]any
		if err := c.do(ctx, "GET", "/_cat/indices/"+n.prefix+"-"+string(k)+"*", map[string][]string{"format": {"json"}}, nil, &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r["index"] == n.legacy(k) {
				t.Errorf("legacy index %s still there after the pass", n.legacy(k))
			}
		}
	}
	for id, w := range map[string]join.Session{"old": wantOld, "new": want} {
		got, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatalf("session %s after the move: %v", id, err)
		}
		sameJSON(t, "session "+id+" after the move", got.Session, w)
		if len(got.Processes) != 1 {
			t.Errorf("session %s after the move has %d processes, want 1", id, len(got.Processes))
		}
	}
	if ps, _, err := s.ListProcesses(ctx, store.ProcessFilter{}); err != nil || len(ps) != 2 {
		t.Errorf("processes after the move: %d, %v; want 2 (each once)", len(ps), err)
	}
}

func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// TestOpenRefusesConflictingMapping: an existing index whose field has
// another type cannot be brought up to date, and Open says so rather than
// failing every write later (on the real cluster).
func TestOpenRefusesConflictingMapping(t *testing.T) {
	cfg := clusterConfig(t).withDefaults()
	c, err := dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"mappings": map[string]any{"dynamic": "strict", "properties": map[string]any{
		"correlator": obj(map[string]any{"audit_id": long})}}}
	legacy := namesFor(cfg.IndexPrefix, 0).legacy(kindProcesses)
	if err := c.put(context.Background(), "/"+legacy, body, ""); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), cfg, zerolog.Nop(), nil)
	if err == nil || !strings.Contains(err.Error(), "updating mapping of "+legacy) ||
		!strings.Contains(err.Error(), "cannot be changed from type [long] to [keyword]") {
		t.Fatalf("Open over a conflicting mapping: %v", err)
	}
}
