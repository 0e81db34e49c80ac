package deploy

import (
	"strings"
	"testing"
)

const cmDoc = `apiVersion: v1
kind: ConfigMap
metadata: {name: %s}
data:
  %s: "listen: 127.0.0.1:1\n"
`

func cm(name, key string) string {
	return strings.NewReplacer("%s", name).Replace(strings.Replace(cmDoc, "%s: ", key+": ", 1))
}

func TestAgentConfig(t *testing.T) {
	for _, c := range []struct {
		name, in, want, err string
	}{
		{"one", "# comment only\n---\n" + cm("a", AgentConfigKey), "listen: 127.0.0.1:1\n", ""},
		{"other keys only", cm("a", "other.yaml"), "", "no ConfigMap"},
		{"two", cm("a", AgentConfigKey) + "---\n" + cm("b", AgentConfigKey), "", "2 ConfigMaps"},
		{"unknown field", strings.Replace(cm("a", AgentConfigKey), "data:", "datum: 1\ndata:", 1), "", "unknown field"},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nmetadata: {name: b}\n", "", `"metadata" already set`},
		{"kind not shipped", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: x}\n", "", "no kind"},
		{"not yaml", "a: [", "", "decoding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := AgentConfig([]byte(c.in))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestDocuments(t *testing.T) {
	docs, err := Documents([]byte("---\n# only a comment\n---\na: 1\n---\n\n---\nb: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || !strings.Contains(string(docs[0]), "a: 1") || !strings.Contains(string(docs[1]), "b: 2") {
		t.Fatalf("documents %q, want a: 1 and b: 2", docs)
	}
}

// FuzzAgentConfig: any input yields a config or an error, never a panic.
func FuzzAgentConfig(f *testing.F) {
	f.Add([]byte(cm("a", AgentConfigKey)))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = AgentConfig(b)
	})
}
