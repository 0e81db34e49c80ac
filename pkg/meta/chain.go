package meta

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"
)

// source is a named resolver in a chain.
type source struct {
	name string
	Resolver
}

// chain asks its sources in order and returns the first complete answer.
// A partial answer (pod UID only) is kept while later sources are asked, and
// returned if none does better. A source's error does not stop the chain: it
// is counted, and returned only when no source found the container.
type chain struct {
	sources []source
	log     zerolog.Logger
	metrics *metrics
}

func newChain(log zerolog.Logger, m *metrics, sources ...source) *chain {
	return &chain{sources: sources, log: log, metrics: m}
}

func (c *chain) Resolve(ctx context.Context, containerID, podUID string) (Info, bool, error) {
	var (
		errs    []error
		partial Info
		from    string
	)
	for _, s := range c.sources {
		info, found, err := s.Resolve(ctx, containerID, podUID)
		if err != nil {
			c.metrics.sourceError(s.name)
			c.log.Debug().Err(err).Str("source", s.name).Str("containerID", containerID).Msg("meta source failed")
			errs = append(errs, fmt.Errorf("resolving container %q through %s: %w", containerID, s.name, err))
		}
		if !found {
			continue
		}
		if info.complete() {
			c.metrics.resolved(s.name)
			return info, true, nil
		}
		if from == "" {
			partial, from = info, s.name
		}
	}
	if from != "" {
		c.metrics.resolved(from)
		return partial, true, nil
	}
	c.metrics.resolved("none")
	return Info{}, false, errors.Join(errs...)
}

// CgroupFallback answers with only the container ID and the pod UID from the
// cgroup path, when the pod UID is known.
type CgroupFallback struct{}

// Resolve returns Info{ContainerID, PodUID} when podUID is set.
func (CgroupFallback) Resolve(_ context.Context, containerID, podUID string) (Info, bool, error) {
	if podUID == "" {
		return Info{}, false, nil
	}
	return Info{ContainerID: containerID, PodUID: podUID}, true, nil
}
