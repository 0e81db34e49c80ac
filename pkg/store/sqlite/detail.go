package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/execid/correlator/pkg/join"
)

// A process's detail column (version 8) is one JSON object holding the
// fields no query filters or sorts on, under their API names
// (join.Process's JSON tags), a zero value left out. It is written by
// hand, not by encoding/json, because it is on every exec's path.

// processDetailJSON appends p's detail object to b.
func processDetailJSON(b []byte, p *join.Process) ([]byte, error) {
	if math.IsNaN(p.Confidence) || math.IsInf(p.Confidence, 0) {
		return b, fmt.Errorf("encoding process %s: confidence %v is not a number JSON holds", p.ProcessID, p.Confidence)
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
	return append(b, '}'), nil
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

// readProcessDetail sets p's detail fields from the column. It reads
// them into a process of its own, so that a key the column should not
// hold cannot overwrite a column's value.
func readProcessDetail(col sql.NullString, p *join.Process) error {
	if !col.Valid {
		return nil
	}
	var d join.Process
	if err := json.Unmarshal([]byte(col.String), &d); err != nil {
		return fmt.Errorf("decoding detail: %w", err)
	}
	p.ParentProcessID, p.PID, p.PPID, p.UID = d.ParentProcessID, d.PID, d.PPID, d.UID
	p.ArgvTruncated, p.ContainerID, p.PodUID, p.SessionRootID = d.ArgvTruncated, d.ContainerID, d.PodUID, d.SessionRootID
	p.Source, p.Confidence, p.Candidates, p.Flags = d.Source, d.Confidence, d.Candidates, d.Flags
	return nil
}
