package elasticsearch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConnectionResolve: the secrets come from the key file and the
// password variable, and only with a cluster named.
func TestConnectionResolve(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("aWQ6a2V5LTAxMjM0NTY3ODk=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_ES_PASSWORD", "s3cret")
	c := Connection{Config: DefaultConfig(), APIKeyFile: key, PasswordEnv: "TEST_ES_PASSWORD"}
	c.Username = "elastic"
	if c.Configured() {
		t.Error("configured without a URL")
	}
	cfg, err := c.Resolve()
	if err == nil || !strings.Contains(err.Error(), "give --es-url") || cfg.APIKey != "" || cfg.Username != "" || cfg.Password != "" {
		t.Errorf("without a URL: %v, config %+v; want an error and no secrets", err, cfg)
	}
	c.URLs = []string{"http://127.0.0.1:9200"}
	if cfg, err = c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if cfg.APIKey != "aWQ6a2V5LTAxMjM0NTY3ODk=" || cfg.Username != "elastic" || cfg.Password != "s3cret" {
		t.Errorf("resolved %+v", cfg)
	}
	c.APIKeyFile = filepath.Join(t.TempDir(), "missing")
	if _, err := c.Resolve(); err == nil || !strings.Contains(err.Error(), "--es-api-key-file") {
		t.Errorf("missing key file: %v", err)
	}
}
