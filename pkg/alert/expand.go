package alert

import "strings"

// Template syntax tokens, as in Kubernetes' $(VAR) expansion.
const (
	operator        = '$'
	referenceOpener = '('
	referenceCloser = ')'
)

// Expand replaces $(name) references in input with mapping(name), with the
// semantics of k8s.io/kubernetes third_party/forked/golang/expansion: $$ is
// a literal $, a $ not followed by ( or $ is literal, an unterminated $( is
// literal, and whatever mapping returns is copied as is (never expanded
// again, so a captured argv containing $(X) stays data).
//
// One deliberate difference: Kubernetes copies the byte after a lone $ with
// string(byte), which re-encodes a non-ASCII byte as a two-byte rune and
// corrupts UTF-8 ("$é" becomes "$Ã\xa9"); Expand copies the byte as is.
func Expand(input string, mapping func(string) string) string {
	var buf strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(input); cursor++ {
		if input[cursor] == operator && cursor+1 < len(input) {
			buf.WriteString(input[checkpoint:cursor])
			read, isVar, advance := tryReadVariableName(input[cursor+1:])
			if isVar {
				buf.WriteString(mapping(read))
			} else {
				buf.WriteString(read)
			}
			cursor += advance
			checkpoint = cursor + 1
		}
	}
	return buf.String() + input[checkpoint:]
}

// tryReadVariableName reads after an operator: what to emit, whether it is
// a variable name, and how many bytes it consumed.
func tryReadVariableName(input string) (string, bool, int) {
	switch input[0] {
	case operator:
		return input[0:1], false, 1
	case referenceOpener:
		for i := 1; i < len(input); i++ {
			if input[i] == referenceCloser {
				return input[1:i], true, i + 1
			}
		}
		return string(operator) + string(referenceOpener), false, 1
	default:
		return string(operator) + input[0:1], false, 1
	}
}

// syntaxWrap is how an unknown reference is emitted: verbatim.
func syntaxWrap(name string) string {
	return string(operator) + string(referenceOpener) + name + string(referenceCloser)
}

// references lists the names a template refers to, in order.
func references(input string) []string {
	var names []string
	Expand(input, func(name string) string {
		names = append(names, name)
		return ""
	})
	return names
}
