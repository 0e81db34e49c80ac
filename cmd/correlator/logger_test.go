package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestLoggerMillis: each entry carries its time to the millisecond, in
// RFC 3339, at the moment it is written; below the level nothing is
// written. Positive control: an entry at the level is.
func TestLoggerMillis(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, "info")
	log.Debug().Msg("below the level")
	if buf.Len() != 0 {
		t.Fatalf("a debug entry at info: %s", buf.Bytes())
	}
	before := time.Now().Truncate(time.Millisecond)
	log.Info().Msg("at the level")
	after := time.Now()
	var line struct{ Time, Message string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("decoding %s: %v", buf.Bytes(), err)
	}
	at, err := time.Parse(time.RFC3339, line.Time)
	if err != nil {
		t.Fatalf("time %q: %v", line.Time, err)
	}
	if len(line.Time) != len("2006-01-02T15:04:05.000Z") || at.Before(before) || at.After(after) {
		t.Errorf("time %q, want milliseconds within [%v, %v]", line.Time, before, after)
	}
	if line.Message != "at the level" {
		t.Errorf("message %q", line.Message)
	}
}
