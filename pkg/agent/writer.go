package agent

import (
	"time"

	"github.com/execid/correlator/pkg/store"
)

// The node's store writer settings. A commit costs about one WAL page per
// table and index page it touches, whatever the rows in it, so plain rows
// (process and session updates) wait up to a second to share it; a
// durable Add (the audit webhook, which acknowledges only what is on
// disk) waits at most writerDurableGap.
const (
	writerMaxBatch   = 4096
	writerPlainGap   = time.Second
	writerDurableGap = 100 * time.Millisecond
)

// NewStoreWriter is the writer `correlator run` gives the agent: group
// commit when idle, plain rows at most writerPlainGap apart, durable ones
// within writerDurableGap. opts are added after (tests add hooks).
func NewStoreWriter(dst store.BatchWriter, opts ...store.WriterOption) *store.Writer {
	base := []store.WriterOption{store.WithCommitWhenIdle(), store.WithMinCommitGap(writerPlainGap),
		store.WithDurableGap(writerDurableGap)}
	return store.NewWriter(dst, writerMaxBatch, writerPlainGap, append(base, opts...)...)
}
