package auditlog

import "context"

// Sink accepts streaming events into the pipeline. It must copy what it
// keeps. An error means "not accepted": the source keeps the events and
// retries (tail) or refuses the delivery (webhook).
type Sink func(ctx context.Context, evs []Event) error

// Source is anything that feeds a Sink until ctx ends: the Tailer, the
// webhook server, and later an Elasticsearch poller.
type Source interface {
	Run(ctx context.Context, sink Sink) error
}

// Lookup finds the audit records of one auditID on demand; an Elasticsearch
// backed implementation comes with the store ([4 of 5]).
type Lookup interface {
	LookupExec(ctx context.Context, auditID string) ([]ExecRecord, error)
}
