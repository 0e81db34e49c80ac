package kubeapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/execid/correlator/pkg/auditlog"
)

// kube-apiserver's own audit log (the log backend, JSON lines) under the
// shipped policy, read two ways: as audit.k8s.io/v1 Events, and with
// correlator's own parser, as the agent reads it.

// auditPolicy is the shipped audit policy.
var auditPolicy = filepath.Join("..", "..", "deploy", "audit", "audit-policy.yaml")

// auditFlags turn the log backend on at path with the shipped policy;
// blocking: each event is written before the request goes on.
func auditFlags(t *testing.T, path string) []string {
	t.Helper()
	policy, err := filepath.Abs(auditPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + path,
		"--audit-log-format=json", "--audit-log-mode=blocking"}
}

// auditEvents reads every event in the log.
func auditEvents(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	var out []auditv1.Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("decoding an audit event: %v\n%s", err, sc.Bytes())
		}
		out = append(out, ev)
	}
	return out
}

// podEvent picks the events of user's requests to pod's subresource at
// stage.
type podEvent struct {
	user, namespace, pod, subresource string
	stage                             auditv1.Stage
}

func (q podEvent) String() string {
	return fmt.Sprintf("%s's %s of %s/%s at %s", q.user, q.subresource, q.namespace, q.pod, q.stage)
}

func (q podEvent) matches(ev *auditv1.Event) bool {
	ref := ev.ObjectRef
	return ev.User.Username == q.user && ev.Stage == q.stage && ref != nil && ref.Resource == "pods" &&
		ref.Namespace == q.namespace && ref.Name == q.pod && ref.Subresource == q.subresource
}

// find returns the matching events.
func (q podEvent) find(events []auditv1.Event) []auditv1.Event {
	var out []auditv1.Event
	for i := range events {
		if q.matches(&events[i]) {
			out = append(out, events[i])
		}
	}
	return out
}

// auditRecords parses the log with pkg/auditlog's Decoder and merges the
// stages into ExecRecords, as the agent does.
func auditRecords(t *testing.T, path string) map[string]auditlog.ExecRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening the audit log: %v", err)
	}
	defer f.Close()
	m := auditlog.NewMerger(auditlog.MergerConfig{})
	dec := auditlog.NewDecoder(auditlog.DecoderConfig{Source: "file"}, zerolog.Nop(), nil)
	counts, err := dec.Decode(f, path, func(evs []auditlog.Event) error {
		for _, ev := range evs {
			m.Add(ev)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("parsing the audit log: %v", err)
	}
	if n := counts.SkippedTotal(); n != 0 {
		t.Errorf("pkg/auditlog skipped %d events of kube-apiserver's log: %v", n, counts.SkippedByName())
	}
	out := map[string]auditlog.ExecRecord{}
	for _, r := range m.Records() {
		out[r.AuditID] = r
	}
	return out
}
