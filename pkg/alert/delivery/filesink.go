package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/execid/correlator/pkg/store"
)

// fileSink appends alerts as JSON lines and fsyncs each batch.
type fileSink struct {
	path string
	mu   sync.Mutex
	f    *os.File
	buf  []byte
}

func newFileSink(path string) (*fileSink, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening alert file: %w", err)
	}
	return &fileSink{path: path, f: f}, nil
}

func (s *fileSink) Name() string { return "file:" + s.path }

func (s *fileSink) Deliver(_ context.Context, alerts []store.Alert) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf := s.buf[:0]
	for i := range alerts {
		b, err := json.Marshal(&alerts[i])
		if err != nil {
			return fmt.Errorf("encoding alert: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	s.buf = buf
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("writing alert file: %w", err)
	}
	if _, err := s.f.Write(buf); err != nil {
		_ = s.f.Truncate(st.Size()) // no torn line; the batch is retried whole
		return fmt.Errorf("writing alert file: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing alert file: %w", err)
	}
	return nil
}

func (s *fileSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Close()
}
