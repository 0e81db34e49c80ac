package elasticsearch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The retention lease is one document in <prefix>-meta that every agent
// reads before a pass and at most one can take, by optimistic concurrency
// on its sequence number: so 1,000 agents that each tick hourly make one
// pass an interval, whoever ticks first after the last pass ended. A
// holder that dies keeps the others out only until its lease expires.

// leaseDocID is the store's lease; alertsLeaseDocID an alert sink's, whose
// passes drop alert indices only.
const (
	leaseDocID       = "retention-lease"
	alertsLeaseDocID = "alerts-retention-lease"
)

// leaseDoc is the lease as stored. Times are Unix milliseconds of the
// holder's clock; agents' clocks are assumed within minutes of each other.
type leaseDoc struct {
	Holder string `json:"holder"`
	// Until is when the holder's claim ends unless renewed.
	Until int64 `json:"until"`
	// LastDone is when the last pass ended (0: never).
	LastDone int64 `json:"last_done"`
}

// lease is a taken lease: the document's version, to renew and release it.
type lease struct {
	holder      string
	seq, term   int64
	lastDone    int64
	ttl         time.Duration
	idx, id     string
	renewFailed bool
}

type versioned struct {
	Found       bool     `json:"found"`
	SeqNo       int64    `json:"_seq_no"`
	PrimaryTerm int64    `json:"_primary_term"`
	Source      leaseDoc `json:"_source"`
}

type writeAnswer struct {
	SeqNo       int64 `json:"_seq_no"`
	PrimaryTerm int64 `json:"_primary_term"`
}

// errLeaseHeld means another holder has the lease or a pass ended less
// than an interval ago: nothing to do now.
var errLeaseHeld = errors.New("retention lease held or pass done recently")

// takeLease takes the lease for holder when nobody holds it and the last
// pass ended at least interval ago. It returns errLeaseHeld when it may
// not run now.
func (c *conn) takeLease(ctx context.Context, n names, id, holder string, ttl, interval time.Duration, now time.Time) (*lease, error) {
	var cur versioned
	err := c.do(ctx, http.MethodGet, "/"+n.meta+"/_doc/"+id, nil, nil, &cur)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		cur = versioned{}
	case err != nil:
		return nil, fmt.Errorf("reading the retention lease: %w", err)
	}
	ms := now.UnixMilli()
	if cur.Found {
		if cur.Source.Holder != holder && cur.Source.Until > ms {
			return nil, errLeaseHeld
		}
		if ms-cur.Source.LastDone < interval.Milliseconds() {
			return nil, errLeaseHeld
		}
	}
	doc := leaseDoc{Holder: holder, Until: now.Add(ttl).UnixMilli(), LastDone: cur.Source.LastDone}
	q := url.Values{"refresh": {"false"}}
	if cur.Found {
		q.Set("if_seq_no", strconv.FormatInt(cur.SeqNo, 10))
		q.Set("if_primary_term", strconv.FormatInt(cur.PrimaryTerm, 10))
	} else {
		q.Set("op_type", "create")
	}
	var w writeAnswer
	err = c.do(ctx, http.MethodPut, "/"+n.meta+"/_doc/"+id, q, doc, &w)
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return nil, errLeaseHeld // another agent took it between our read and write
	}
	if err != nil {
		return nil, fmt.Errorf("taking the retention lease: %w", err)
	}
	return &lease{holder: holder, seq: w.SeqNo, term: w.PrimaryTerm, lastDone: doc.LastDone, ttl: ttl, idx: n.meta, id: id}, nil
}

// write replaces the lease document if nobody changed it since we did.
func (l *lease) write(ctx context.Context, c *conn, doc leaseDoc) error {
	q := url.Values{"if_seq_no": {strconv.FormatInt(l.seq, 10)},
		"if_primary_term": {strconv.FormatInt(l.term, 10)}}
	var w writeAnswer
	if err := c.do(ctx, http.MethodPut, "/"+l.idx+"/_doc/"+l.id, q, doc, &w); err != nil {
		return err
	}
	l.seq, l.term = w.SeqNo, w.PrimaryTerm
	return nil
}

// renew pushes the lease's end ttl past now; a pass renews it between
// indices so a long pass (a migration) is not taken over. A failed renewal
// is remembered: the pass goes on (its steps are idempotent), but it will
// not mark itself done.
func (l *lease) renew(ctx context.Context, c *conn, now time.Time) {
	if l.renewFailed {
		return
	}
	if err := l.write(ctx, c, leaseDoc{Holder: l.holder, Until: now.Add(l.ttl).UnixMilli(), LastDone: l.lastDone}); err != nil {
		l.renewFailed = true
	}
}

// release ends the lease and records the pass's end (when done is true),
// so that the next pass waits a whole interval.
func (l *lease) release(ctx context.Context, c *conn, now time.Time, done bool) error {
	if l.renewFailed {
		return errors.New("releasing the retention lease: lost it during the pass")
	}
	last := l.lastDone
	if done {
		last = now.UnixMilli()
	}
	if err := l.write(ctx, c, leaseDoc{Holder: l.holder, Until: now.UnixMilli(), LastDone: last}); err != nil {
		return fmt.Errorf("releasing the retention lease: %w", err)
	}
	return nil
}
