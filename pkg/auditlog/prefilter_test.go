package auditlog

import (
	"encoding/json"
	"strings"
	"testing"
)

// canonicalHead is what the apiserver's encoder writes first, so lines built
// on it take the fast path in canonicalEvent.
const canonicalHead = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseStarted",` +
	`"requestURI":"/api/v1/namespaces/ns/pods/p/exec?command=sh","verb":"create","user":{"username":"alice"},`

// streamingLines are streaming events spelled in ways the apiserver never
// writes but encoding/json accepts. Each must be decoded and kept.
var streamingLines = []string{
	// Plain, for reference.
	canonicalHead + `"objectRef":{"resource":"pods","namespace":"ns","name":"p","subresource":"exec"},"stageTimestamp":"2026-01-01T00:00:00Z"}`,
	// Whitespace around the colon and before the brace.
	canonicalHead + `"objectRef":{"resource":"pods","namespace":"ns","name":"p","subresource" : "exec" },"stageTimestamp":"2026-01-01T00:00:00Z"}`,
	canonicalHead + "\"objectRef\":{\"resource\":\"pods\",\t\"subresource\":\t\"attach\"\t}}",
	// Subresource before resource; objectRef last.
	canonicalHead + `"stageTimestamp":"2026-01-01T00:00:00Z","objectRef":{"subresource":"portforward","resource":"pods"}}`,
	// Escaped value: no "exec" in the bytes at all.
	canonicalHead + `"objectRef":{"resource":"pods","subresource":"\u0065\u0078\u0065\u0063"}}`,
	canonicalHead + `"objectRef":{"resource":"pods","subresource":"e\u0078ec"}}`,
	canonicalHead + `"objectRef":{"resource":"pods","subresource":"\u0061ttach"}}`,
	// Escaped, upper-case and Unicode-folded keys (encoding/json folds keys).
	canonicalHead + `"objectRef":{"resource":"pods","sub\u0072esource":"exec"}}`,
	canonicalHead + `"OBJECTREF":{"RESOURCE":"pods","SUBRESOURCE":"exec"}}`,
	canonicalHead + `"objectRef":{"resource":"pods","ſubresource":"exec"}}`,
	// A quoted "exec" key elsewhere must not hide the value.
	canonicalHead + `"requestObject":{"exec":{"command":["ls"]}},"objectRef":{"resource":"pods","subresource":"exec"}}`,
	// Ephemeral containers are patched, not created.
	strings.Replace(canonicalHead, `"verb":"create"`, `"verb":"patch"`, 1) + `"objectRef":{"resource":"pods","subresource":"ephemeralcontainers"}}`,
	// Not the canonical prefix: the general decoder path.
	`{ "objectRef": { "subresource": "exec", "resource": "pods" }, "verb": "get", "auditID": "a2", "kind": "Event" }`,
	`{"level":"Metadata","verb":"create","auditID":"a3","objectRef":{"resource":"pods","subresource":"exec"}}`,
	// Framed.
	`2026-01-01T00:00:00.000000000Z stdout F ` + canonicalHead + `"objectRef":{"resource":"pods", "subresource": "exec"}}`,
	`master-0 ` + canonicalHead + `"objectRef":{"resource":"pods","subresource":"\u0065xec"}}`,
}

func TestPrefilterKeepsUnusualSpellings(t *testing.T) {
	for _, line := range streamingLines {
		p := NewParser(0)
		evs := p.ParseLine([]byte(line))
		if len(evs) != 1 || !IsStreaming(&evs[0]) {
			t.Errorf("streaming line not kept (counts %+v):\n%s", p.Counts(), line)
		}
		if c := p.Counts(); c.Streaming != 1 || c.SkippedTotal() != 0 {
			t.Errorf("counts %+v for:\n%s", c, line)
		}
	}
}

func TestMayBeStreaming(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`"subresource":"exec"}`, true},
		{`"subresource":"exec"`, true}, // cut short: still a candidate
		{`["exec"]`, true},             // a false positive, but a harmless one
		{`"subresource":"status"}`, false},
		{`"livenessProbe":{"exec":{"command":["sh"]}}`, false},
		{`"exec" :{}`, false},
		{`"exec"` + "\t\n:", false},
		{`"executor":"x","attacher":"y","portforwarder":"z"`, false},
		{`"a":"\u0026\u003c\n\"\\"`, false},
		{`"a":"\u004a"`, true},
		{`"a":"\u007A"`, true},
		{`"a":"\u0080"`, false},
		{`x`, false},
		{`h"`, false},
		{`\`, false},
		{`\u00`, false},
		{``, false},
	} {
		if got := mayBeStreaming([]byte(tc.in)); got != tc.want {
			t.Errorf("mayBeStreaming(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzMayBeStreaming checks the prefilter is conservative: whatever
// encoding/json reads as a streaming event, the prefilter lets through.
func FuzzMayBeStreaming(f *testing.F) {
	for _, l := range streamingLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev Event
		if json.Unmarshal(b, &ev) == nil && IsStreaming(&ev) && !mayBeStreaming(b) {
			t.Fatalf("streaming event rejected by the prefilter: %q", b)
		}
	})
}
