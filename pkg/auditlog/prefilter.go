package auditlog

import "bytes"

// The prefilter tells from raw bytes whether a canonical Event may be a
// streaming one and needs a decode; it must never reject one IsStreaming
// accepts. It looks for the subresource value, not the key: encoding/json
// matches keys case-insensitively and through \u escapes, but IsStreaming
// compares values exactly, so a streaming value is either written verbatim
// or spells a letter as \u00XX. Searches anchor IndexByte (vectorised) on a
// byte rare in audit JSON; bytes.Index anchors on the first byte, '"',
// which is everywhere, and drops to a byte-at-a-time loop.

// valueToken is a quoted value and the offset of its anchor byte.
type valueToken struct {
	text   string
	anchor int
}

// Value tokens grouped by anchor byte: x, h, w.
var (
	execTokens = []valueToken{{`"` + SubresourceExec + `"`, 2}}
	hTokens    = []valueToken{{`"` + SubresourceAttach + `"`, 6}, {`"` + SubresourceEphemeralContainers + `"`, 3}}
	pfTokens   = []valueToken{{`"` + SubresourcePortForward + `"`, 8}}
)

// mayBeStreaming reports whether b may hold a streaming event. False
// positives (a body quoting "exec", an escaped letter) only cost a decode.
func mayBeStreaming(b []byte) bool {
	return hasValue(b, execTokens) || hasValue(b, hTokens) || hasValue(b, pfTokens) || hasLetterEscape(b)
}

// hasValue reports whether b holds one of toks as a JSON string that is not
// an object key. All toks share their anchor byte.
func hasValue(b []byte, toks []valueToken) bool {
	c := toks[0].text[toks[0].anchor]
	for i := 0; ; i++ {
		j := bytes.IndexByte(b[i:], c)
		if j < 0 {
			return false
		}
		i += j
		for _, t := range toks {
			if isValueAt(b, i, t) {
				return true
			}
		}
	}
}

// isValueAt reports whether t sits in b with its anchor at i and is not
// followed by a colon. In valid JSON a string value is followed by , } or ]
// (after whitespace); a key by a colon. Pod specs have "exec" keys.
func isValueAt(b []byte, i int, t valueToken) bool {
	start, end := i-t.anchor, i-t.anchor+len(t.text)
	// Test the quotes first: most anchor hits sit inside longer words.
	if start < 0 || end > len(b) || b[start] != '"' || b[end-1] != '"' || string(b[start:end]) != t.text {
		return false
	}
	for _, c := range b[end:] {
		if !isSpace(c) {
			return c != ':'
		}
	}
	return true
}

// hasLetterEscape reports whether b holds \u0040 to \u007f, the escapes that
// decode to ASCII letters (and a few others). Encoders escape only control
// characters, quotes, <, >, & and such, so this is rare.
func hasLetterEscape(b []byte) bool {
	for i := 0; ; i++ {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return false
		}
		i += j
		if e := b[i+1:]; len(e) >= 4 && e[0] == 'u' && e[1] == '0' && e[2] == '0' && e[3] >= '4' && e[3] <= '7' {
			return true
		}
	}
}
