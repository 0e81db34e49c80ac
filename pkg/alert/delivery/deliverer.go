package delivery

import (
	"context"
	"errors"

	"github.com/execid/correlator/pkg/store"
)

// ErrRejected marks a Deliver error that retrying cannot fix (the receiver
// refused the batch as malformed); the Dispatcher drops the batch and
// counts it instead of retrying forever.
var ErrRejected = errors.New("rejected by the receiver")

// Deliverer is one sink's transport. The Dispatcher calls Deliver from a
// single goroutine per sink, with batches read back from that sink's spool.
type Deliverer interface {
	// Name identifies the sink in logs and metric labels, e.g. "webhook" or
	// "syslog+tcp://127.0.0.1:514". It never contains a secret.
	Name() string
	// Deliver sends the batch. nil means every alert was delivered; an
	// error means the whole batch is retried later, so receivers should
	// dedupe by Alert.ID (sinks do where the receiver allows). An error
	// wrapping ErrRejected (the receiver refused the batch as malformed)
	// drops the batch instead, counted as dropped{reason="rejected"}.
	Deliver(ctx context.Context, alerts []store.Alert) error
	// Close releases connections and files.
	Close() error
}
