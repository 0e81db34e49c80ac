package auditlog

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// errBadTimestamp marks a timestamp that is present but unreadable.
var errBadTimestamp = errors.New("bad timestamp")

// Time is a timestamp decoded leniently: the apiserver writes MicroTime
// (6 digits, Z), but captures and vendors use 0-9 digits, offsets and a space
// instead of T. null and "" decode to the zero time.
type Time struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (t *Time) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		t.Time = time.Time{}
		return nil
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("parsing timestamp: %w", errBadTimestamp)
	}
	v, err := parseTime(b[1 : len(b)-1])
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// parseTime reads YYYY-MM-DD[T ]hh:mm:ss[.f{0,9}][Z|±hh:mm|±hhmm]; without a
// zone it assumes UTC. Empty input yields the zero time.
func parseTime(b []byte) (time.Time, error) {
	if len(b) == 0 {
		return time.Time{}, nil
	}
	bad := func() (time.Time, error) {
		return time.Time{}, fmt.Errorf("parsing timestamp: %w", errBadTimestamp)
	}
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != 't' && b[10] != ' ') ||
		b[13] != ':' || b[16] != ':' {
		return bad()
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 ||
		month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 60 {
		return bad()
	}
	rest := b[19:]
	nsec := 0
	if len(rest) > 0 && (rest[0] == '.' || rest[0] == ',') {
		i := 1
		scale := 100000000
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			if i > 9 {
				return bad()
			}
			nsec += int(rest[i]-'0') * scale
			scale /= 10
			i++
		}
		rest = rest[i:]
	}
	loc := time.UTC
	switch {
	case len(rest) == 0:
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
	case rest[0] == '+' || rest[0] == '-':
		off, ok := parseOffset(rest[1:])
		if !ok {
			return bad()
		}
		if rest[0] == '-' {
			off = -off
		}
		if off != 0 {
			loc = time.FixedZone("", off)
		}
	default:
		return bad()
	}
	if sec == 60 { // leap second: clamp like RFC 3339 readers do
		sec = 59
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc)
	if t.Day() != day { // e.g. Feb 30 normalised into March
		return bad()
	}
	if t = t.UTC(); t.Year() < 1 || t.Year() > 9999 { // offsets can leave the 4-digit range
		return bad()
	}
	return t, nil
}

// parseOffset reads hh:mm, hhmm or hh and returns seconds east of UTC.
func parseOffset(b []byte) (int, bool) {
	var h, m int
	var ok bool
	switch len(b) {
	case 2:
		h, ok = digits(b)
	case 4:
		var ok2 bool
		h, ok = digits(b[0:2])
		m, ok2 = digits(b[2:4])
		ok = ok && ok2
	case 5:
		var ok2 bool
		h, ok = digits(b[0:2])
		m, ok2 = digits(b[3:5])
		ok = ok && ok2 && b[2] == ':'
	}
	if !ok || h > 23 || m > 59 {
		return 0, false
	}
	return h*3600 + m*60, true
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
