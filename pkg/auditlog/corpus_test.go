package auditlog

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
)

// corpus is a file of the public audit corpus, which lives beside the
// repository and is never copied in.
func corpus(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(testutil.AuditCorpus(t), rel)
}

func onlyRecord(t *testing.T, path string) ExecRecord {
	t.Helper()
	recs, counts, _ := decodeAll(t, path)
	if len(recs) != 1 {
		t.Fatalf("%s: got %d records, want 1 (counts %+v)", path, len(recs), counts)
	}
	return recs[0]
}

func TestCorpusFalcoExec(t *testing.T) {
	r := onlyRecord(t, corpus(t, "falco/test__trace_files__k8s_audit__exec_pod.json"))
	want := ExecRecord{
		AuditID: "ca1ed9f4-7bf4-4c85-81a8-1b11253d1ba6", Verb: "create", Subresource: "exec",
		Namespace: "default", Pod: "nginx-deployment-7998647bdf-phvq7", Container: "nginx1",
		Stdin: boolPtr(true), TTY: boolPtr(true), Code: 101, Decision: "allow",
	}
	checkCore(t, r, want)
	if !slices.Equal(r.Command, []string{"bash"}) {
		t.Errorf("command = %q", r.Command)
	}
	if r.User.Username != "minikube-user" || !slices.Equal(r.User.Groups, []string{"system:masters", "system:authenticated"}) {
		t.Errorf("user = %+v", r.User)
	}
	if got := r.RequestReceivedTimestamp; !got.Equal(time.Date(2018, 10, 26, 13, 38, 34, 867116000, time.UTC)) {
		t.Errorf("requestReceivedTimestamp = %v", got)
	}
	if !slices.Equal(r.Stages, []string{StageResponseStarted}) || !r.EndTimestamp.IsZero() {
		t.Errorf("stages = %v end = %v", r.Stages, r.EndTimestamp)
	}
	if !slices.Equal(r.SourceIPs, []string{"192.168.99.1"}) {
		t.Errorf("sourceIPs = %v", r.SourceIPs)
	}
}

func TestCorpusFalcoAttach(t *testing.T) {
	r := onlyRecord(t, corpus(t, "falco/test__trace_files__k8s_audit__attach_pod.json"))
	want := ExecRecord{
		AuditID: "14933b4e-7b09-4964-af09-b7987367e1ba", Verb: "create", Subresource: "attach",
		Namespace: "default", Pod: "nginx-deployment-7998647bdf-phvq7", Container: "nginx1",
		Stdin: boolPtr(true), TTY: boolPtr(false), Code: 101, Decision: "allow",
	}
	checkCore(t, r, want)
	if len(r.Command) != 0 {
		t.Errorf("attach has command %q", r.Command)
	}
}

func checkCore(t *testing.T, got, want ExecRecord) {
	t.Helper()
	type core struct {
		AuditID, Verb, Subresource, Namespace, Pod, Container, Decision string
		Stdin, TTY                                                      string
		Code                                                            int32
	}
	g := core{got.AuditID, got.Verb, got.Subresource, got.Namespace, got.Pod, got.Container, got.Decision, triState(got.Stdin), triState(got.TTY), got.Code}
	w := core{want.AuditID, want.Verb, want.Subresource, want.Namespace, want.Pod, want.Container, want.Decision, triState(want.Stdin), triState(want.TTY), want.Code}
	if g != w {
		t.Errorf("record core\n got %+v\nwant %+v", g, w)
	}
}

func TestCorpusFalcoMalformed(t *testing.T) {
	recs, counts, _ := decodeAll(t, corpus(t, "falco/test__trace_files__k8s_audit__fal_01_003.json"))
	if len(recs) != 0 || counts.Events != 0 {
		t.Fatalf("got %d records, %d events from {\"kind\": 0}", len(recs), counts.Events)
	}
	if counts.Skipped[ReasonBadFieldType] != 1 || counts.SkippedTotal() != 1 {
		t.Fatalf("skips = %v, want one bad_field_type", counts.SkippedByName())
	}
}

// TestCorpusFalcoAll decodes every falco fixture: none may be lost or fail,
// and exactly the exec and attach ones are streaming.
func TestCorpusFalcoAll(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(corpus(t, "falco"), "*.json"))
	if err != nil || len(files) < 40 {
		t.Fatalf("glob: %v (%d files)", err, len(files))
	}
	var total Counts
	streaming := 0
	for _, f := range files {
		recs, c, _ := decodeAll(t, f)
		total.Add(c)
		streaming += len(recs)
	}
	if total.SkippedTotal() != 1 {
		t.Errorf("skipped %v, want only fal_01_003", total.SkippedByName())
	}
	// Some fixtures hold several events; every other file holds at least one.
	if int(total.Events) < len(files)-1 || streaming != 2 {
		t.Errorf("events = %d (files %d), streaming records = %d", total.Events, len(files), streaming)
	}
}

func TestCorpusAudit2rbacImpersonation(t *testing.T) {
	f, err := os.Open(corpus(t, "audit2rbac/testdata__demo.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := NewDecoder(DecoderConfig{AllEvents: true}, zerolog.Nop(), nil)
	byUser := map[string]int{}
	counts, err := d.Decode(f, "demo.log", func(evs []Event) error {
		for _, ev := range evs {
			if ev.ImpersonatedUser == nil {
				t.Errorf("event %s without impersonatedUser", ev.AuditID)
				continue
			}
			if ev.User.Username != "system:admin" {
				t.Errorf("event %s: user %q", ev.AuditID, ev.User.Username)
			}
			byUser[ev.ImpersonatedUser.Username]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"alice": 3, "bob": 29, "system:serviceaccount:ns1:sa1": 5}
	if counts.Events != 37 || counts.SkippedTotal() != 0 || len(byUser) != len(want) {
		t.Fatalf("events %d skipped %v users %v", counts.Events, counts.SkippedByName(), byUser)
	}
	for u, n := range want {
		if byUser[u] != n {
			t.Errorf("impersonated %q: %d events, want %d", u, byUser[u], n)
		}
	}
}

func TestCorpusApiserverEncoder(t *testing.T) {
	for _, name := range []string{"log_backend_format-json.log", "webhook_body_EventList.json", "log_backend_format-legacy.log"} {
		t.Run(name, func(t *testing.T) {
			recs, counts, ms := decodeAll(t, corpus(t, "apiserver-encoder/"+name))
			if len(recs) != 1 || counts.SkippedTotal() != 0 {
				t.Fatalf("records %d, skipped %v", len(recs), counts.SkippedByName())
			}
			r := recs[0]
			checkCore(t, r, ExecRecord{
				AuditID: "11111111-2222-3333-4444-555555555555", Verb: "create", Subresource: "exec",
				Namespace: "default", Pod: "web", Container: "c", Stdin: boolPtr(true), TTY: boolPtr(true), Code: 101,
				Decision: map[bool]string{true: "", false: "allow"}[name == "log_backend_format-legacy.log"],
			})
			if r.ImpersonatedUser == nil || r.ImpersonatedUser.Username != "bob" || r.Effective().Username != "bob" {
				t.Errorf("impersonatedUser = %+v", r.ImpersonatedUser)
			}
			if r.UserAgent != "kubectl/v1.30.0 <x>" || !slices.Equal(r.Command, []string{"sh"}) {
				t.Errorf("userAgent %q command %q", r.UserAgent, r.Command)
			}
			if name != "log_backend_format-legacy.log" && ms.Duplicates != 1 {
				t.Errorf("duplicates = %d, want the repeated line dropped", ms.Duplicates)
			}
		})
	}
}

// triState prints a tri-state bool for comparisons.
func triState(b *bool) string {
	if b == nil {
		return "unknown"
	}
	return strconv.FormatBool(*b)
}
