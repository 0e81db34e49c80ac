package auditlog

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/audit/golden")

const samplesDir = "../../testdata/audit"

// decodeAll runs one input through a Decoder and a Merger, the way
// `correlator audit parse` does.
func decodeAll(t testing.TB, path string) ([]ExecRecord, Counts, MergerStats) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := NewDecoder(DecoderConfig{}, zerolog.Nop(), nil)
	m := NewMerger(MergerConfig{})
	counts, err := d.Decode(f, filepath.Base(path), func(evs []Event) error {
		for _, ev := range evs {
			m.Add(ev)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return m.Records(), counts, m.Stats()
}

func renderGolden(t *testing.T, recs []ExecRecord, c Counts, ms MergerStats) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	summary := map[string]any{
		"lines": c.Lines, "events": c.Events, "streamingEvents": c.Streaming,
		"skipped": c.SkippedByName(), "records": ms.Records, "duplicates": ms.Duplicates, "conflicts": ms.Conflicts,
	}
	if err := enc.Encode(summary); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	entries, err := os.ReadDir(samplesDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) == ".md" {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) {
			recs, counts, ms := decodeAll(t, filepath.Join(samplesDir, e.Name()))
			got := renderGolden(t, recs, counts, ms)
			golden := filepath.Join(samplesDir, "golden", e.Name()+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading golden (run with -update): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s (run with -update and review the diff)\ngot:\n%s", golden, got)
			}
		})
	}
	if n < 10 {
		t.Fatalf("found only %d samples in %s", n, samplesDir)
	}
}
