package auditlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// DefaultMaxLineBytes bounds one line or one CRI-reassembled record. Events
// are usually a few KiB and the apiserver splits webhook batches at 10 MiB,
// so a longer line is garbage or an abuse; a 50 MB exec line decoded whole
// once took an agent to 712 MB RSS. Longer lines are streamed past, never
// buffered, and counted as skipped (too_large).
const DefaultMaxLineBytes = 4 << 20

// maxNesting bounds envelopes inside envelopes (array of EventLists, ...).
const maxNesting = 4

var (
	utf8BOM = []byte("\xef\xbb\xbf")
	// The apiserver's encoder writes kind and apiVersion first; EventList items
	// start with level. Lines with these prefixes take the fast path.
	fastEventPrefix = []byte(`{"kind":"Event",`)
	fastItemPrefix  = []byte(`{"level":"`)
)

// Parser is the pure core of ingestion: bytes in, streaming events and
// counters out. It keeps only the state a framing needs across lines (CRI
// partial lines). Not safe for concurrent use.
type Parser struct {
	// All makes the Parser decode and return every event, not only the
	// streaming ones; this disables the fast path.
	All bool

	maxLine int
	counts  Counts
	events  []Event
	skips   []Reason
	partial []byte // CRI "P" chunks awaiting their "F" line
}

// NewParser returns a Parser; maxLine <= 0 means DefaultMaxLineBytes.
func NewParser(maxLine int) *Parser {
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	return &Parser{maxLine: maxLine}
}

// Counts returns the running totals.
func (p *Parser) Counts() Counts { return p.counts }

// Skips returns the reasons skipped by the last ParseLine/ParseDocument call;
// valid until the next call.
func (p *Parser) Skips() []Reason { return p.skips }

// ParseLine parses one line of a log (without its newline) in any line
// framing: JSON, `hostname {json}`, CRI `ts stream P|F {json}`, or the legacy
// text format. It returns the streaming events found; the slice is reused by
// the next call.
func (p *Parser) ParseLine(line []byte) []Event {
	p.reset()
	p.counts.Lines++
	p.line(line)
	return p.events
}

// ParseDocument parses a whole body: one or more JSON values (EventList,
// Event, array, vendor envelope), or JSON lines. Used for webhook bodies and
// pretty-printed files.
func (p *Parser) ParseDocument(b []byte) []Event {
	p.reset()
	b = trimSpace(bytes.TrimPrefix(b, utf8BOM))
	if bytes.HasPrefix(b, fastEventPrefix) {
		// Compact apiserver lines: JSON lines framing.
		for len(b) > 0 {
			var line []byte
			line, b, _ = bytes.Cut(b, []byte("\n"))
			p.line(line)
		}
		return p.events
	}
	p.text(b, 0)
	return p.events
}

// SkipTooLarge records a line the framing had to drop for its size.
func (p *Parser) SkipTooLarge() {
	p.reset()
	p.counts.Lines++
	p.skip(ReasonTooLarge)
}

func (p *Parser) reset() {
	p.events = p.events[:0]
	p.skips = p.skips[:0]
}

func (p *Parser) skip(r Reason) {
	p.counts.Skipped[r]++
	p.skips = append(p.skips, r)
}

func (p *Parser) line(line []byte) {
	line = trimSpace(bytes.TrimPrefix(line, utf8BOM))
	if len(line) == 0 {
		return
	}
	if line[0] == '{' || line[0] == '[' {
		p.text(line, 0)
		return
	}
	if rest, partial, ok := cutCRI(line); ok {
		p.cri(rest, partial)
		return
	}
	if ev, ok := parseLegacy(line); ok {
		p.event(&ev)
		return
	}
	if rest, ok := cutHostname(line); ok {
		p.text(rest, 0)
		return
	}
	p.skip(ReasonUnknownFormat)
}

func (p *Parser) cri(rest []byte, partial bool) {
	if len(p.partial)+len(rest) > p.maxLine {
		p.partial = p.partial[:0]
		p.skip(ReasonTooLarge)
		return
	}
	if partial {
		p.partial = append(p.partial, rest...)
		return
	}
	if len(p.partial) > 0 {
		p.partial = append(p.partial, rest...)
		rest = p.partial
		defer func() { p.partial = p.partial[:0] }()
	}
	p.line(rest)
}

// text parses one or more JSON values; the common single apiserver-encoded
// Event is handled without decoding unless it may be a streaming request.
func (p *Parser) text(b []byte, depth int) {
	if len(b) == 0 {
		return
	}
	if bytes.HasPrefix(b, fastEventPrefix) {
		p.canonicalEvent(b)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return
		}
		if err != nil {
			p.skip(syntaxReason(err))
			return
		}
		p.value(raw, depth)
	}
}

// canonicalEvent handles a value the apiserver's encoder wrote (it cannot be
// an envelope). Unless mayBeStreaming says it may be a streaming request it
// is counted without decoding, allocating nothing.
func (p *Parser) canonicalEvent(b []byte) {
	switch {
	case b[len(b)-1] != '}':
		p.skip(ReasonTruncated)
	case p.All || mayBeStreaming(b):
		p.decodeEvent(b)
	default:
		p.counts.Events++
	}
}

// envelope holds the keys that tell the non-Event shapes apart.
type envelope struct {
	Items      json.RawMessage `json:"items"`
	Records    json.RawMessage `json:"records"`
	LogEvents  json.RawMessage `json:"logEvents"`
	Properties json.RawMessage `json:"properties"`
	// CloudWatch Logs subscription data: DATA_MESSAGE or CONTROL_MESSAGE.
	MessageType string `json:"messageType"`
	// GKE: a Cloud Logging LogEntry, or a Pub/Sub message carrying one.
	ProtoPayload json.RawMessage `json:"protoPayload"`
	Message      json.RawMessage `json:"message"`
	Data         json.RawMessage `json:"data"`
}

func (p *Parser) value(raw []byte, depth int) {
	raw = trimSpace(raw)
	if len(raw) == 0 {
		return
	}
	if depth > maxNesting {
		p.skip(ReasonNotAnEvent)
		return
	}
	switch raw[0] {
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			p.skip(syntaxReason(err))
			return
		}
		for _, it := range items {
			p.value(it, depth+1)
		}
		return
	case '{':
	default:
		p.skip(ReasonNotAnEvent)
		return
	}
	if bytes.HasPrefix(raw, fastEventPrefix) || (depth > 0 && bytes.HasPrefix(raw, fastItemPrefix)) {
		p.canonicalEvent(raw)
		return
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		p.skip(syntaxReason(err))
		return
	}
	switch {
	case isArray(env.Items):
		p.value(env.Items, depth+1)
	case isArray(env.Records):
		p.records(env.Records, depth)
	case env.MessageType == cwControlMessage:
		// CloudWatch Logs checking the destination: nothing to read.
	case isArray(env.LogEvents):
		p.cloudWatch(env.LogEvents)
	case isObject(env.Properties):
		// One Azure diagnostic record per line (Log Analytics exports,
		// Event Hubs captures, SIEM pipelines).
		p.aksRecord(raw, depth)
	case isGKEEntry(env.ProtoPayload):
		p.gke(raw)
	case isObject(env.Message) || isString(env.Data):
		p.pubSub(raw, depth)
	default:
		p.decodeEvent(raw)
	}
}

func (p *Parser) decodeEvent(raw []byte) {
	var ev Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		p.skip(decodeReason(err))
		return
	}
	if !looksLikeEvent(&ev) {
		p.skip(ReasonNotAnEvent)
		return
	}
	p.event(&ev)
}

func (p *Parser) event(ev *Event) {
	p.counts.Events++
	streaming := IsStreaming(ev)
	if streaming {
		p.counts.Streaming++
	}
	if streaming || p.All {
		if boundEventID(ev) {
			p.counts.IDsTruncated++
		}
		p.events = append(p.events, *ev)
	}
}

func decodeReason(err error) Reason {
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, errBadTimestamp):
		return ReasonBadTimestamp
	case errors.As(err, &te):
		return ReasonBadFieldType
	}
	return syntaxReason(err)
}

func syntaxReason(err error) Reason {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return ReasonTruncated
	}
	var se *json.SyntaxError
	if errors.As(err, &se) && se.Error() == "unexpected end of JSON input" {
		return ReasonTruncated
	}
	return ReasonMalformedJSON
}

func isObject(b json.RawMessage) bool {
	b = trimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

func isString(b json.RawMessage) bool {
	b = trimSpace(b)
	return len(b) > 0 && b[0] == '"'
}

func isArray(b json.RawMessage) bool {
	b = trimSpace(b)
	return len(b) > 0 && b[0] == '['
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
