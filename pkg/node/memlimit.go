package node

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/rs/zerolog"
)

// SetMemoryLimit sets the Go runtime's soft memory limit to ratio of the
// container's limit: memory the runtime does not count (BPF maps charged to
// the cgroup, SQLite's page cache, thread stacks) must fit in the rest, or
// the cgroup kills the agent before the collector reacts. GOMEMLIMIT, when
// set, wins.
func SetMemoryLimit(limitBytes int64, ratio float64, log zerolog.Logger) error {
	if limitBytes <= 0 {
		return nil
	}
	if ratio <= 0 || ratio > 1 {
		return fmt.Errorf("validating --memory-limit-ratio %v: want a value in (0, 1]", ratio)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		log.Info().Str("component", "run").Msg("GOMEMLIMIT set: --memory-limit-bytes ignored")
		return nil
	}
	soft := int64(float64(limitBytes) * ratio)
	debug.SetMemoryLimit(soft)
	log.Info().Str("component", "run").Int64("containerLimitBytes", limitBytes).Int64("goMemoryLimitBytes", soft).Msg("memory limit set")
	return nil
}
