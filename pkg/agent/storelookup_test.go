package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
)

// sessions is a SessionReader over a map; a missing ID is ErrNotFound.
type sessions map[string]store.SessionDetail

func (s sessions) GetSession(_ context.Context, id string) (store.SessionDetail, error) {
	if d, ok := s[id]; ok {
		return d, nil
	}
	if id == "broken" {
		return store.SessionDetail{}, errors.New("disk on fire")
	}
	return store.SessionDetail{}, fmt.Errorf("reading session %s: %w", id, store.ErrNotFound)
}

// storedStages parses req's audit log lines and keeps each stage as the
// agent stores it.
func storedStages(t *testing.T, req testutil.ExecRequest) []store.AuditRecord {
	t.Helper()
	p := auditlog.NewParser(0)
	var out []store.AuditRecord
	for _, line := range bytes.Split(bytes.TrimSpace(req.LogLines()), []byte("\n")) {
		for _, ev := range p.ParseLine(line) {
			r, err := store.AuditRecordOf(&ev)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatal("no stages parsed")
	}
	return out
}

func TestStoredRecords(t *testing.T) {
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "alice", Groups: []string{"dev"}, As: "deployer",
		Namespace: "shop", Pod: "web-0", Container: "app", Command: []string{"sh"}, Received: time.Now(), Duration: time.Second}
	l := NewStoredRecords(sessions{req.AuditID: {AuditRecords: storedStages(t, req)}})
	recs, err := l.LookupExec(context.Background(), req.AuditID)
	if err != nil || len(recs) != 1 {
		t.Fatalf("LookupExec = %d records, %v; want 1", len(recs), err)
	}
	r := recs[0]
	if r.AuditID != req.AuditID || r.User.Username != "alice" || r.Effective().Username != "deployer" ||
		r.Namespace != "shop" || r.Pod != "web-0" || r.Container != "app" || !r.Complete() {
		t.Errorf("record from the store: %+v", r)
	}
	if recs, err := l.LookupExec(context.Background(), "never-seen"); err != nil || len(recs) != 0 {
		t.Errorf("unknown ID: %d records, %v; want none and no error", len(recs), err)
	}
	if _, err := l.LookupExec(context.Background(), "broken"); err == nil {
		t.Error("a failing store read returned no error")
	}
}

// lookupFunc adapts a function to auditlog.Lookup.
type lookupFunc func(string) ([]auditlog.ExecRecord, error)

func (f lookupFunc) LookupExec(_ context.Context, id string) ([]auditlog.ExecRecord, error) {
	return f(id)
}

func TestLookupsFirstWithRecords(t *testing.T) {
	none := lookupFunc(func(string) ([]auditlog.ExecRecord, error) { return nil, nil })
	fail := lookupFunc(func(string) ([]auditlog.ExecRecord, error) { return nil, errors.New("es down") })
	found := lookupFunc(func(id string) ([]auditlog.ExecRecord, error) { return []auditlog.ExecRecord{{AuditID: id}}, nil })
	for _, tc := range []struct {
		name    string
		ls      Lookups
		want    int
		wantErr bool
	}{
		{"first has none, second has it", Lookups{none, found}, 1, false},
		{"an error before a hit is not reported", Lookups{fail, found}, 1, false},
		{"none anywhere", Lookups{none, none}, 0, false},
		{"only errors", Lookups{none, fail}, 0, true},
	} {
		recs, err := tc.ls.LookupExec(context.Background(), "x")
		if len(recs) != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: %d records, err %v", tc.name, len(recs), err)
		}
	}
}
