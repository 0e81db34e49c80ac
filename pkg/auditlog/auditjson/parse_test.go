package auditjson

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

func TestParse(t *testing.T) {
	files, err := filepath.Glob("../../../testdata/audit/*.log")
	if err != nil || len(files) < 5 {
		t.Fatalf("samples: %v %d", err, len(files))
	}
	var out, errOut bytes.Buffer
	cfg := ParseConfig{In: strings.NewReader(""), Out: &out, ErrOut: &errOut,
		MaxRecords: auditlog.DefaultMaxRecords, MaxLineBytes: auditlog.DefaultMaxLineBytes}
	if err := Parse(cfg, files, zerolog.Nop()); err != nil {
		t.Fatalf("parse failed on inputs with bad records: %v", err)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	n, conflicts := 0, 0
	for sc.Scan() {
		var r auditlog.ExecRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("output line %d: %v", n, err)
		}
		// Stages may be absent: request_body.log has an event naming none.
		if r.AuditID == "" || r.Pod == "" || r.Subresource == "" {
			t.Errorf("incomplete record %+v", r)
		}
		if r.HasFlag(vocab.FlagAuditIDConflict) {
			conflicts++
		}
		n++
	}
	if n < 10 || conflicts < 2 { // legacy.log reuses IDs of other samples too
		t.Errorf("%d records, %d in conflict", n, conflicts)
	}
	summary := errOut.String()
	for _, want := range []string{"bytes ", "lines ", "events ", "streaming records ", "skipped records: ", "bad_field_type", "truncated"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}

	if err := Parse(cfg, []string{"does-not-exist.log"}, zerolog.Nop()); err == nil {
		t.Error("unreadable input did not fail")
	}
}
