package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/store/storetest"
)

// TestContract runs the backend contract against SQLite in a real file;
// pkg/store/elasticsearch runs the same suite against Elasticsearch.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "store.db"),
			sqlite.Config{SessionProcessLimit: storetest.SessionProcessLimit}, zerolog.Nop())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
