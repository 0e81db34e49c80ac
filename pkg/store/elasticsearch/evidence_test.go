package elasticsearch

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestEvidenceMapping (on the real cluster): the index a process with
// evidence lands in maps correlator.evidence as a disabled object (kept in
// _source, nothing of it indexed, so strict mapping takes whatever it
// holds) and correlator.record_delay_seconds as a number; the document
// holds both, and the store reads them back. Control: a term query on a
// value inside the evidence finds nothing, while one on the record delay
// finds the process.
func TestEvidenceMapping(t *testing.T) {
	ctx := context.Background()
	cfg := clusterConfig(t)
	s := openCluster(t, cfg)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := join.Process{Exec: capture.Exec{ProcessID: "p1", PID: 7}, Start: t0, Attribution: vocab.AttributionAuditID,
		AuditID: "s1", Flags: []string{}, RecordDelay: 2.5,
		Captured:   capture.KeyValue{Value: "s1", Claimed: "forged", Source: vocab.SourceEnv, Flags: []string{"env_mismatch"}},
		SPO:        capture.KeyValue{Value: "spo-1"},
		Bridge:     capture.KeyValue{Claimed: "s0"},
		ExecOrigin: capture.OriginContainerInit}
	if err := s.Write(ctx, store.Batch{Processes: []join.Process{p}}); err != nil {
		t.Fatal(err)
	}

	pattern := s.n.templatePattern(kindProcesses)
	var mappings map[string]struct {
		Mappings struct {
			Dynamic    any `json:"dynamic"`
			Properties struct {
				Correlator struct {
					Properties map[string]map[string]any `json:"properties"`
				} `json:"correlator"`
			} `json:"properties"`
		} `json:"mappings"`
	}
	if err := s.c.do(ctx, "GET", "/"+pattern+"/_mapping", nil, nil, &mappings); err != nil {
		t.Fatal(err)
	}
	if len(mappings) == 0 {
		t.Fatalf("no index matches %s", pattern)
	}
	for index, m := range mappings {
		c := m.Mappings.Properties.Correlator.Properties
		if ev := c["evidence"]; ev["enabled"] != false || ev["properties"] != nil {
			t.Errorf("%s maps correlator.evidence as %v, want a disabled object with no fields", index, ev)
		}
		if rd := c["record_delay_seconds"]; rd["type"] != "double" {
			t.Errorf("%s maps correlator.record_delay_seconds as %v, want a double", index, rd)
		}
		if pu := c["pending_until"]; pu["type"] != "date_nanos" {
			t.Errorf("%s maps correlator.pending_until as %v, want date_nanos", index, pu)
		}
		if m.Mappings.Dynamic != "strict" {
			t.Errorf("%s's mapping is dynamic %v, want strict", index, m.Mappings.Dynamic)
		}
	}

	count := func(query map[string]any) int {
		t.Helper()
		res, err := s.search(ctx, s.n.processes, map[string]any{"query": query})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Hits.Hits)
	}
	if n := count(map[string]any{"term": map[string]any{"correlator.record_delay_seconds": 2.5}}); n != 1 {
		t.Errorf("control: the record delay is not searchable (%d hits)", n)
	}
	if n := count(map[string]any{"term": map[string]any{"correlator.evidence.captured.claimed": "forged"}}); n != 0 {
		t.Errorf("a value in the evidence is indexed (%d hits)", n)
	}

	res, err := s.search(ctx, s.n.processes, map[string]any{"query": map[string]any{"match_all": map[string]any{}}})
	if err != nil || len(res.Hits.Hits) != 1 {
		t.Fatalf("reading the document: %v, %v", res.Hits.Hits, err)
	}
	var doc struct {
		Correlator struct {
			RecordDelay float64         `json:"record_delay_seconds"`
			Evidence    json.RawMessage `json:"evidence"`
		} `json:"correlator"`
	}
	if err := json.Unmarshal(res.Hits.Hits[0].Source, &doc); err != nil {
		t.Fatal(err)
	}
	const want = `{"captured":{"value":"s1","claimed":"forged","source":"env","flags":["env_mismatch"]},` +
		`"spo":{"value":"spo-1"},"bridge":{"claimed":"s0"},"exec_origin":"container_init"}`
	if doc.Correlator.RecordDelay != 2.5 || string(doc.Correlator.Evidence) != want {
		t.Errorf("document holds delay %v, evidence %s; want 2.5, %s", doc.Correlator.RecordDelay, doc.Correlator.Evidence, want)
	}
	got, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
	if err != nil || len(got) != 1 {
		t.Fatalf("ListProcesses = %v, %v", got, err)
	}
	g := got[0]
	if g.RecordDelay != p.RecordDelay || g.Captured.Claimed != "forged" || g.SPO.Value != p.SPO.Value || g.Bridge.Claimed != "s0" ||
		g.ExecOrigin != p.ExecOrigin {
		t.Errorf("read back %+v", g)
	}
}
