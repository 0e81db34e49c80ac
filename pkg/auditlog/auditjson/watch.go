package auditjson

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/execid/correlator/pkg/auditlog"
)

// Watch runs the sources into one merger and prints every updated record
// to w until ctx ends or a source fails.
func Watch(ctx context.Context, srcs []auditlog.Source, m *auditlog.Merger, w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var mu sync.Mutex
	sink := func(_ context.Context, evs []auditlog.Event) error {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			for _, r := range m.Add(ev).Updated {
				if err := enc.Encode(&r); err != nil {
					return fmt.Errorf("writing record: %w", err)
				}
			}
		}
		return nil
	}
	return auditlog.RunSources(ctx, srcs, sink)
}
