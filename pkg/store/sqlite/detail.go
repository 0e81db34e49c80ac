package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
)

// A process's detail column (version 8) is one JSON object holding the
// fields no query filters or sorts on, under their API names
// (join.Process's JSON tags), a zero value left out. It is written by
// hand, not by encoding/json, because it is on every exec's path.
//
// It also keeps the joiner's input evidence, which the API never serves
// (join.Process's `json:"-"` fields): under "evidence", an object of
// the keys' captured values (captured, spo, bridge: each a
// capture.KeyValue under its JSON names) and execOrigin, each left out
// when zero, the object too when all are. An agent reads it back to hand
// a process the joiner has forgotten (a restart) to it again. A column
// written before has no evidence and reads back none.

// processDetailJSON appends p's detail object to b.
func processDetailJSON(b []byte, p *join.Process) ([]byte, error) {
	if math.IsNaN(p.Confidence) || math.IsInf(p.Confidence, 0) {
		return b, fmt.Errorf("encoding process %s: confidence %v is not a number JSON holds", p.ProcessID, p.Confidence)
	}
	if math.IsNaN(p.RecordDelay) || math.IsInf(p.RecordDelay, 0) {
		return b, fmt.Errorf("encoding process %s: record delay %v is not a number JSON holds", p.ProcessID, p.RecordDelay)
	}
	b = append(b, '{')
	start := len(b)
	str := func(key, v string) {
		if v != "" {
			b = jsonKey(b, start, key)
			b = jsonString(b, v)
		}
	}
	num := func(key string, v uint32) {
		if v != 0 {
			b = jsonKey(b, start, key)
			b = strconv.AppendUint(b, uint64(v), 10)
		}
	}
	list := func(key string, vs []string) {
		if len(vs) == 0 {
			return
		}
		b = jsonKey(b, start, key)
		b = append(b, '[')
		for i, v := range vs {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonString(b, v)
		}
		b = append(b, ']')
	}
	str("parentProcessID", p.ParentProcessID)
	num("pid", p.PID)
	num("ppid", p.PPID)
	num("uid", p.UID)
	if p.ArgvTruncated {
		b = append(jsonKey(b, start, "argvTruncated"), "true"...)
	}
	str("containerID", p.ContainerID)
	str("podUID", p.PodUID)
	str("sessionRootID", p.SessionRootID)
	str("source", string(p.Source))
	if p.Confidence != 0 {
		b = strconv.AppendFloat(jsonKey(b, start, "confidence"), p.Confidence, 'g', -1, 64)
	}
	list("candidates", p.Candidates)
	list("flags", p.Flags)
	if p.RecordDelay != 0 {
		b = strconv.AppendFloat(jsonKey(b, start, "recordDelaySeconds"), p.RecordDelay, 'g', -1, 64)
	}
	if !p.PendingUntil.IsZero() {
		// As encoding/json writes it: the row is read back through it.
		b = append(jsonKey(b, start, "pendingUntil"), '"')
		b = append(p.PendingUntil.UTC().AppendFormat(b, time.RFC3339Nano), '"')
	}
	if hasEvidence(p) {
		b = appendEvidence(jsonKey(b, start, "evidence"), p)
	}
	return append(b, '}'), nil
}

// hasEvidence reports whether p holds any of the joiner's input
// evidence.
func hasEvidence(p *join.Process) bool {
	return !zeroKeyValue(&p.Captured) || !zeroKeyValue(&p.SPO) || !zeroKeyValue(&p.Bridge) || p.ExecOrigin != ""
}

func zeroKeyValue(v *capture.KeyValue) bool {
	return v.Value == "" && v.Claimed == "" && v.Source == "" && len(v.Flags) == 0
}

// appendEvidence appends p's evidence object, its zero members left out.
func appendEvidence(b []byte, p *join.Process) []byte {
	b = append(b, '{')
	start := len(b)
	for _, kv := range [...]struct {
		key string
		v   *capture.KeyValue
	}{{"captured", &p.Captured}, {"spo", &p.SPO}, {"bridge", &p.Bridge}} {
		if !zeroKeyValue(kv.v) {
			b = appendKeyValue(jsonKey(b, start, kv.key), kv.v)
		}
	}
	if p.ExecOrigin != "" {
		b = jsonString(jsonKey(b, start, "execOrigin"), string(p.ExecOrigin))
	}
	return append(b, '}')
}

// appendKeyValue appends v as encoding/json writes a capture.KeyValue.
func appendKeyValue(b []byte, v *capture.KeyValue) []byte {
	b = append(b, '{')
	start := len(b)
	for _, f := range [...]struct{ key, v string }{{"value", v.Value}, {"claimed", v.Claimed}, {"source", string(v.Source)}} {
		if f.v != "" {
			b = jsonString(jsonKey(b, start, f.key), f.v)
		}
	}
	if len(v.Flags) > 0 {
		b = jsonStrings(jsonKey(b, start, "flags"), v.Flags)
	}
	return append(b, '}')
}

// jsonStrings appends vs as a JSON array of strings.
func jsonStrings(b []byte, vs []string) []byte {
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonString(b, v)
	}
	return append(b, ']')
}

// jsonKey appends key and its colon, after a comma unless the object
// (whose first member would begin at start) is still empty.
func jsonKey(b []byte, start int, key string) []byte {
	if len(b) > start {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// jsonString appends s as a JSON string: as it is where it is printable
// ASCII needing no escape (every ID and name the agent writes), and
// through encoding/json otherwise.
func jsonString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// detailEvidence is the evidence object as it is read.
type detailEvidence struct {
	Captured   capture.KeyValue `json:"captured"`
	SPO        capture.KeyValue `json:"spo"`
	Bridge     capture.KeyValue `json:"bridge"`
	ExecOrigin capture.Origin   `json:"execOrigin"`
}

// set sets p's evidence from e: none (nil, an older column) is zero.
func (e *detailEvidence) set(p *join.Process) {
	var v detailEvidence
	if e != nil {
		v = *e
	}
	p.Captured, p.SPO, p.Bridge, p.ExecOrigin = v.Captured, v.SPO, v.Bridge, v.ExecOrigin
}

// processDetail is a detail column as it is read: the process's fields
// under their API names, and the evidence.
type processDetail struct {
	join.Process
	Evidence *detailEvidence `json:"evidence"`
}

// readProcessDetail sets p's detail fields from the column. It reads
// them into a process of its own, so that a key the column should not
// hold cannot overwrite a column's value.
func readProcessDetail(col sql.NullString, p *join.Process) error {
	if !col.Valid {
		return nil
	}
	var d processDetail
	if err := unmarshalJSON([]byte(col.String), &d); err != nil {
		return fmt.Errorf("decoding detail: %w", err)
	}
	p.ParentProcessID, p.PID, p.PPID, p.UID = d.ParentProcessID, d.PID, d.PPID, d.UID
	p.ArgvTruncated, p.ContainerID, p.PodUID, p.SessionRootID = d.ArgvTruncated, d.ContainerID, d.PodUID, d.SessionRootID
	p.Source, p.Confidence, p.Candidates, p.Flags = d.Source, d.Confidence, d.Candidates, d.Flags
	p.RecordDelay, p.PendingUntil = d.RecordDelay, d.PendingUntil
	d.Evidence.set(p)
	return nil
}
