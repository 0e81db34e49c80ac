package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

func TestAuditParseCommand(t *testing.T) {
	files, err := filepath.Glob("../../testdata/audit/*.log")
	if err != nil || len(files) < 5 {
		t.Fatalf("samples: %v %d", err, len(files))
	}
	cmd := newAuditCmd(&globalOptions{logLevel: "error"})
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(append([]string{"parse"}, files...))
	if err := cmd.Execute(); err != nil {
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

	cmd.SetArgs([]string{"parse", "does-not-exist.log"})
	if err := cmd.Execute(); err == nil {
		t.Error("unreadable input did not fail")
	}
}
