package delivery

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// rfc5424 is a message as the strict test parser reads it.
type rfc5424 struct {
	Pri                                 int
	Timestamp, Host, App, ProcID, MsgID string
	SD                                  map[string]map[string]string
	BOM                                 bool
	Msg                                 string
}

var tsRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$`)

// parseRFC5424 parses one message strictly by RFC 5424's ABNF.
func parseRFC5424(b []byte) (*rfc5424, error) {
	s := string(b)
	m := &rfc5424{SD: map[string]map[string]string{}}
	if !strings.HasPrefix(s, "<") {
		return nil, errors.New("no PRI")
	}
	end := strings.IndexByte(s, '>')
	if end < 2 || end > 4 {
		return nil, errors.New("bad PRI")
	}
	pri, err := strconv.Atoi(s[1:end])
	if err != nil || pri > 191 || (len(s[1:end]) > 1 && s[1] == '0') {
		return nil, fmt.Errorf("bad PRIVAL %q", s[1:end])
	}
	m.Pri = pri
	s = s[end+1:]
	if !strings.HasPrefix(s, "1 ") {
		return nil, errors.New("VERSION is not 1")
	}
	s = s[2:]
	fields := []*string{&m.Timestamp, &m.Host, &m.App, &m.ProcID, &m.MsgID}
	limits := []int{0, 255, 48, 128, 32}
	for i, f := range fields {
		sp := strings.IndexByte(s, ' ')
		if sp < 1 {
			return nil, fmt.Errorf("header field %d missing", i)
		}
		*f, s = s[:sp], s[sp+1:]
		if i == 0 {
			if *f != "-" && !tsRE.MatchString(*f) {
				return nil, fmt.Errorf("bad TIMESTAMP %q", *f)
			}
			continue
		}
		if len(*f) > limits[i] {
			return nil, fmt.Errorf("header field %d longer than %d", i, limits[i])
		}
		for _, c := range []byte(*f) {
			if c < 33 || c > 126 {
				return nil, fmt.Errorf("header field %d not PRINTUSASCII", i)
			}
		}
	}
	// STRUCTURED-DATA
	if strings.HasPrefix(s, "-") {
		s = s[1:]
	} else {
		if !strings.HasPrefix(s, "[") {
			return nil, errors.New("no STRUCTURED-DATA")
		}
		for strings.HasPrefix(s, "[") {
			var err error
			s, err = parseSDElement(s[1:], m.SD)
			if err != nil {
				return nil, err
			}
		}
	}
	if s == "" {
		return m, nil
	}
	if s[0] != ' ' {
		return nil, errors.New("no SP before MSG")
	}
	s = s[1:]
	if strings.HasPrefix(s, "\xef\xbb\xbf") {
		m.BOM = true
		s = s[3:]
		if !utf8.ValidString(s) {
			return nil, errors.New("MSG-UTF8 is not UTF-8")
		}
	}
	m.Msg = s
	return m, nil
}

func sdName(s string) (string, string, error) {
	i := 0
	for i < len(s) && s[i] >= 33 && s[i] <= 126 && s[i] != '=' && s[i] != ']' && s[i] != '"' && s[i] != ' ' {
		i++
	}
	if i == 0 || i > 32 && !strings.Contains(s[:i], "@") || i > 64 {
		return "", "", fmt.Errorf("bad SD-NAME at %q", s)
	}
	return s[:i], s[i:], nil
}

func parseSDElement(s string, sd map[string]map[string]string) (string, error) {
	id, s, err := sdName(s)
	if err != nil {
		return "", err
	}
	if _, dup := sd[id]; dup {
		return "", fmt.Errorf("SD-ID %s repeated", id)
	}
	params := map[string]string{}
	sd[id] = params
	for {
		if strings.HasPrefix(s, "]") {
			return s[1:], nil
		}
		if !strings.HasPrefix(s, " ") {
			return "", errors.New("want SP or ] in SD-ELEMENT")
		}
		var name string
		name, s, err = sdName(s[1:])
		if err != nil {
			return "", err
		}
		if len(name) > 32 {
			return "", errors.New("PARAM-NAME longer than 32")
		}
		if !strings.HasPrefix(s, `="`) {
			return "", errors.New(`want =" after PARAM-NAME`)
		}
		s = s[2:]
		var v strings.Builder
		for {
			if s == "" {
				return "", errors.New("unterminated PARAM-VALUE")
			}
			c := s[0]
			if c == '\\' && len(s) > 1 && (s[1] == '"' || s[1] == '\\' || s[1] == ']') {
				v.WriteByte(s[1])
				s = s[2:]
				continue
			}
			if c == '"' {
				s = s[1:]
				break
			}
			if c == ']' || c == '\\' {
				return "", fmt.Errorf("unescaped %q in PARAM-VALUE", c)
			}
			v.WriteByte(c)
			s = s[1:]
		}
		if !utf8.ValidString(v.String()) {
			return "", errors.New("PARAM-VALUE is not UTF-8")
		}
		params[name] = v.String()
	}
}

// readOctetCounted reads one RFC 6587 octet-counted frame: MSG-LEN SP MSG.
func readOctetCounted(r *bufio.Reader) ([]byte, error) {
	lenStr, err := r.ReadString(' ')
	if err != nil {
		return nil, err
	}
	lenStr = strings.TrimSuffix(lenStr, " ")
	if lenStr == "" || lenStr[0] == '0' || len(lenStr) > 9 {
		return nil, fmt.Errorf("bad MSG-LEN %q", lenStr)
	}
	n, err := strconv.Atoi(lenStr)
	if err != nil {
		return nil, fmt.Errorf("bad MSG-LEN %q", lenStr)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// splitCEF splits a CEF record into its 7 header fields (unescaped) and
// its extension map, strictly.
func splitCEF(s string) ([]string, map[string]string, error) {
	if !strings.HasPrefix(s, "CEF:") {
		return nil, nil, errors.New("not CEF")
	}
	s = s[4:]
	var hdr []string
	var cur strings.Builder
	i := 0
	for len(hdr) < 7 {
		if i >= len(s) {
			return nil, nil, errors.New("short CEF header")
		}
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && (s[i+1] == '\\' || s[i+1] == '|'):
			cur.WriteByte(s[i+1])
			i += 2
		case c == '\\':
			return nil, nil, errors.New("bad escape in CEF header")
		case c == '|':
			hdr = append(hdr, cur.String())
			cur.Reset()
			i++
		case c == '\n' || c == '\r':
			return nil, nil, errors.New("line break in CEF header")
		default:
			cur.WriteByte(c)
			i++
		}
	}
	ext := map[string]string{}
	rest := s[i:]
	keyRE := regexp.MustCompile(`^[A-Za-z0-9_]+=`)
	for rest != "" {
		k := keyRE.FindString(rest)
		if k == "" {
			return nil, nil, fmt.Errorf("bad CEF key at %q", rest)
		}
		rest = rest[len(k):]
		var v strings.Builder
		for rest != "" {
			c := rest[0]
			if c == '\\' {
				if len(rest) < 2 {
					return nil, nil, errors.New("trailing backslash")
				}
				switch rest[1] {
				case '\\', '=':
					v.WriteByte(rest[1])
				case 'n':
					v.WriteByte('\n')
				case 'r':
					v.WriteByte('\r')
				default:
					return nil, nil, fmt.Errorf("bad CEF escape \\%c", rest[1])
				}
				rest = rest[2:]
				continue
			}
			if c == '=' {
				return nil, nil, errors.New("unescaped = in CEF value")
			}
			if c == '\n' || c == '\r' {
				return nil, nil, errors.New("raw line break in CEF value")
			}
			if c == ' ' && keyRE.MatchString(rest[1:]) {
				rest = rest[1:]
				break
			}
			v.WriteByte(c)
			rest = rest[1:]
		}
		ext[strings.TrimSuffix(k, "=")] = v.String()
	}
	return hdr, ext, nil
}
