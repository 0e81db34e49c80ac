package node

import (
	"errors"
	"fmt"
	"sync"
)

// readiness is what /readyz answers: the probes are attached and the
// sources built before the API serves at all, so it checks what can fail
// while running: the store takes writes, and no part (capture, an audit
// source, the agent) stopped before shutdown.
type readiness struct {
	store interface{ Healthy() error }

	mu      sync.Mutex
	stopped error
}

// partStopped records a part that ended before shutdown.
func (r *readiness) partStopped(name string, err error) {
	if err == nil {
		err = errors.New("returned without an error")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped == nil {
		r.stopped = fmt.Errorf("%s stopped: %w", name, err)
	}
}

func (r *readiness) check() error {
	if err := r.store.Healthy(); err != nil {
		return fmt.Errorf("store not writable: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}
