package auditlog

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
)

// Cloud envelopes around audit events: Azure diagnostic records (AKS),
// CloudWatch Logs subscription data and Amazon Data Firehose HTTP endpoint
// deliveries (EKS).

// aksCategories are the diagnostic categories that carry audit events;
// a record of another category (kube-apiserver, guard, ...) holds a log
// line of its own.
var aksCategories = [...]string{"kube-audit", "kube-audit-admin"}

// cwControlMessage is the messageType of the data CloudWatch Logs sends to
// check a subscription's destination; it carries no log events.
const cwControlMessage = "CONTROL_MESSAGE"

// record is one item of a {"records": [...]} envelope: an Azure diagnostic
// record, or a Firehose HTTP endpoint record.
type record struct {
	Category   *string `json:"category"`
	Properties *struct {
		Log json.RawMessage `json:"log"`
	} `json:"properties"`
	Data *string `json:"data"`
}

// records reads the items of a {"records": [...]} envelope: Azure
// diagnostic records (Event Hubs, storage exports) or Firehose records.
func (p *Parser) records(raw []byte, depth int) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.skip(ReasonBadEnvelope)
		return
	}
	for _, it := range items {
		p.oneRecord(it, depth)
	}
}

// aksRecord reads one Azure diagnostic record on its own; an object with
// properties but neither a category nor properties.log is not one.
func (p *Parser) aksRecord(raw []byte, depth int) {
	var r record
	if err := json.Unmarshal(raw, &r); err == nil && r.Category == nil && (r.Properties == nil || len(r.Properties.Log) == 0) {
		p.skip(ReasonNotAnEvent)
		return
	}
	p.oneRecord(raw, depth)
}

func (p *Parser) oneRecord(raw []byte, depth int) {
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		p.skip(ReasonBadEnvelope)
		return
	}
	switch {
	case r.Data != nil && r.Properties == nil:
		p.firehoseRecord(*r.Data, depth)
	case r.Category != nil && !isAuditCategory(*r.Category):
		p.skip(ReasonNotAnEvent)
	case r.Properties == nil:
		p.skip(ReasonBadEnvelope)
	default:
		p.aksLog(r.Properties.Log, depth)
	}
}

func isAuditCategory(c string) bool {
	for _, a := range aksCategories {
		if c == a {
			return true
		}
	}
	return false
}

// aksLog reads properties.log: the Event, usually as a JSON string (often
// ending in a newline), sometimes as an object.
func (p *Parser) aksLog(log json.RawMessage, depth int) {
	log = trimSpace(log)
	switch {
	case len(log) > 0 && log[0] == '"':
		var s string
		if err := json.Unmarshal(log, &s); err != nil {
			p.skip(ReasonBadEnvelope)
			return
		}
		p.line([]byte(s))
	case len(log) > 0 && log[0] == '{':
		p.value(log, depth+1)
	default:
		p.skip(ReasonBadEnvelope)
	}
}

// cloudWatch reads the logEvents of a CloudWatch Logs subscription
// DATA_MESSAGE; each message is one log line.
func (p *Parser) cloudWatch(raw []byte) {
	var evs []struct {
		Message *string `json:"message"`
	}
	if err := json.Unmarshal(raw, &evs); err != nil {
		p.skip(ReasonBadEnvelope)
		return
	}
	for _, e := range evs {
		if e.Message == nil {
			p.skip(ReasonBadEnvelope)
			continue
		}
		p.line([]byte(*e.Message))
	}
}

// firehoseRecord reads the base64 data of one Firehose HTTP endpoint record:
// CloudWatch Logs subscription data, gzip'd unless the stream decompresses
// it, or (with message extraction on) the log lines themselves.
func (p *Parser) firehoseRecord(data string, depth int) {
	b, err := decodeBase64(data)
	if err != nil {
		p.skip(ReasonBadEnvelope)
		return
	}
	b, err = gunzipBounded(b, p.maxInflate())
	switch {
	case errors.Is(err, errInflateLimit):
		p.skip(ReasonTooLarge)
		return
	case err != nil:
		p.skip(ReasonBadEnvelope)
		return
	}
	b = trimSpace(b)
	if len(b) == 0 {
		p.skip(ReasonBadEnvelope)
		return
	}
	if b[0] == '{' && bytes.Contains(b, []byte("\n{")) {
		// Extracted messages: one event per line.
		for len(b) > 0 {
			var line []byte
			line, b, _ = bytes.Cut(b, []byte("\n"))
			p.line(line)
		}
		return
	}
	p.text(b, depth+1)
}

// maxInflate bounds what one compressed record may inflate to.
func (p *Parser) maxInflate() int { return 4 * p.maxLine }

var errInflateLimit = errors.New("inflated data over the limit")

// gunzipBounded inflates b if it is gzip (by its magic bytes), reading no
// more than limit bytes; other data is returned as is.
func gunzipBounded(b []byte, limit int) ([]byte, error) {
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		return b, nil
	}
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer gz.Close()
	out, err := io.ReadAll(io.LimitReader(gz, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(out) > limit {
		return nil, errInflateLimit
	}
	return out, nil
}
