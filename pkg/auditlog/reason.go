package auditlog

// Reason says why a record was skipped. The set is small and fixed so that it
// can label a metric.
type Reason uint8

// Skip reasons.
const (
	ReasonMalformedJSON Reason = iota // JSON syntax error
	ReasonTruncated                   // input ends inside a value
	ReasonBadFieldType                // a field has the wrong JSON type, e.g. {"kind":0}
	ReasonBadTimestamp                // a timestamp that no lenient reading accepts
	ReasonNotAnEvent                  // valid JSON without the shape of an Event
	ReasonUnknownFormat               // a line in no known framing
	ReasonBadEnvelope                 // a vendor envelope whose payload cannot be read
	ReasonTooLarge                    // over the configured line or body size
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonMalformedJSON: "malformed_json",
	ReasonTruncated:     "truncated",
	ReasonBadFieldType:  "bad_field_type",
	ReasonBadTimestamp:  "bad_timestamp",
	ReasonNotAnEvent:    "not_an_event",
	ReasonUnknownFormat: "unknown_format",
	ReasonBadEnvelope:   "bad_envelope",
	ReasonTooLarge:      "too_large",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons lists every skip reason, in a stable order.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Counts are running totals of what a Parser has seen.
type Counts struct {
	Lines     int64 // framed lines handed to ParseLine
	Events    int64 // audit events recognised (streaming or not)
	Streaming int64 // events that are streaming requests
	Skipped   [numReasons]int64
	// IDsTruncated counts events handed on whose auditID was over
	// MaxAuditIDBytes and now holds its bounded form (BoundAuditID).
	IDsTruncated int64
}

// SkippedTotal sums the skip counters.
func (c *Counts) SkippedTotal() int64 {
	var n int64
	for _, v := range c.Skipped {
		n += v
	}
	return n
}

// SkippedByName returns the non-zero skip counters keyed by reason name.
func (c *Counts) SkippedByName() map[string]int64 {
	m := map[string]int64{}
	for i, v := range c.Skipped {
		if v > 0 {
			m[Reason(i).String()] = v
		}
	}
	return m
}

// Add accumulates o into c.
func (c *Counts) Add(o Counts) {
	c.Lines += o.Lines
	c.Events += o.Events
	c.Streaming += o.Streaming
	c.IDsTruncated += o.IDsTruncated
	for i := range c.Skipped {
		c.Skipped[i] += o.Skipped[i]
	}
}
