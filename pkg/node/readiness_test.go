package node

import (
	"errors"
	"strings"
	"testing"
)

type fakeHealth struct{ err error }

func (f *fakeHealth) Healthy() error { return f.err }

func TestReadiness(t *testing.T) {
	h := &fakeHealth{}
	r := &readiness{store: h}
	if err := r.check(); err != nil {
		t.Fatalf("fresh agent not ready: %v", err)
	}
	h.err = errors.New("database or disk is full")
	if err := r.check(); err == nil || !strings.Contains(err.Error(), "store not writable") {
		t.Errorf("store failing: ready = %v", err)
	}
	h.err = nil
	if err := r.check(); err != nil {
		t.Errorf("store recovered: ready = %v", err)
	}
	r.partStopped("auditlog", errors.New("tailing /var/log/audit.log: permission denied"))
	r.partStopped("capture", nil)
	if err := r.check(); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a source stopped: ready = %v, want the first failure", err)
	}
}
