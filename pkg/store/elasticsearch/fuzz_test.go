package elasticsearch

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/execid/correlator/pkg/store"
)

// FuzzParseCursor: any client string either decodes to a cursor that
// round-trips or is ErrInvalidCursor; it never panics.
func FuzzParseCursor(f *testing.F) {
	f.Add("")
	f.Add(cursor{nanos: 1772366400123456789, key: "s1"}.String())
	f.Add(cursor{nanos: 0, key: "a.b.c"}.String())
	f.Add("djEuMS4y")
	f.Fuzz(func(t *testing.T, s string) {
		c, ok, err := parseCursor(s)
		if err != nil {
			if !errors.Is(err, store.ErrInvalidCursor) {
				t.Fatalf("parseCursor(%q) = %v, not ErrInvalidCursor", s, err)
			}
			return
		}
		if !ok {
			if s != "" {
				t.Fatalf("parseCursor(%q): no cursor and no error", s)
			}
			return
		}
		c2, _, err := parseCursor(c.String())
		if err != nil || c2 != c {
			t.Fatalf("cursor %+v does not round-trip: %+v, %v", c, c2, err)
		}
	})
}

// FuzzExecRecordsFromSources: search hit sources from the cluster are
// outside input; reading them never panics and every record found belongs
// to the auditID asked for.
func FuzzExecRecordsFromSources(f *testing.F) {
	ours, _ := json.Marshal(map[string]any{"correlator": map[string]any{"audit_id": "a1", "audit_event": execEvent("a1", "ResponseComplete", "alice", 5)}})
	f.Add(ours, []byte(agentDoc(execEvent("a1", "RequestReceived", "alice", 0))))
	f.Add([]byte(`{"kubernetes":{"audit":{"annotations":{"x_y/z":1}}}}`), []byte(`not json`))
	f.Add([]byte(`{"correlator":{"audit_event":"[{\"auditID\":\"a1\"}]"}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		recs, skipped := execRecordsFromSources("a1", [][]byte{a, b})
		if skipped < 0 || skipped > 2 {
			t.Fatalf("skipped = %d", skipped)
		}
		for _, r := range recs {
			if r.AuditID != "a1" {
				t.Fatalf("record of %q returned for a1", r.AuditID)
			}
		}
	})
}
