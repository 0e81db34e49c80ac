package auditlog

import (
	"bytes"
	"strconv"
	"strings"
)

// cutCRI strips a CRI log prefix `<RFC3339Nano> <stdout|stderr> <P|F> `, as
// written when the apiserver logs to stdout (--audit-log-path=-). partial is
// true for "P" chunks, which the runtime splits off lines over 16 KiB.
func cutCRI(line []byte) (rest []byte, partial, ok bool) {
	ts, rest, found := bytes.Cut(line, []byte(" "))
	if !found || len(ts) < 19 || ts[0] < '0' || ts[0] > '9' {
		return nil, false, false
	}
	var stream []byte
	stream, rest, found = bytes.Cut(rest, []byte(" "))
	if !found || (string(stream) != "stdout" && string(stream) != "stderr") {
		return nil, false, false
	}
	tag, rest, found := bytes.Cut(rest, []byte(" "))
	if !found {
		// An empty F line has no trailing space.
		tag, rest = rest, nil
	}
	// The tag may carry more flags after a colon in future runtimes.
	tag, _, _ = bytes.Cut(tag, []byte(":"))
	switch string(tag) {
	case "P":
		return rest, true, true
	case "F":
		return rest, false, true
	}
	return nil, false, false
}

// cutHostname strips OpenShift must-gather's `<hostname> ` prefix.
func cutHostname(line []byte) ([]byte, bool) {
	host, rest, found := bytes.Cut(line, []byte(" "))
	if !found || len(host) == 0 || len(rest) == 0 || rest[0] != '{' {
		return nil, false
	}
	return rest, true
}

// parseLegacy reads --audit-log-format=legacy:
//
//	<ts> AUDIT: id="…" stage="…" ip="…" method="…" user="…" groups="…" as="…" asgroups="…" user-agent="…" namespace="…" uri="…" response="…"
//
// It has no objectRef, so the target comes from the URI path.
func parseLegacy(line []byte) (Event, bool) {
	const marker = " AUDIT: "
	ts, rest, found := bytes.Cut(line, []byte(marker))
	if !found {
		return Event{}, false
	}
	ev := Event{legacy: true}
	when, err := parseTime(ts)
	if err != nil {
		return Event{}, false
	}
	ev.RequestReceivedTimestamp = Time{when}
	s := string(rest)
	for s != "" {
		s = strings.TrimLeft(s, " ")
		key, after, ok := strings.Cut(s, "=")
		if !ok || key == "" {
			break
		}
		q, err := strconv.QuotedPrefix(after)
		if err != nil {
			return Event{}, false
		}
		s = after[len(q):]
		val, err := strconv.Unquote(q)
		if err != nil {
			return Event{}, false
		}
		setLegacyField(&ev, key, val)
	}
	if ev.AuditID == "" && ev.RequestURI == "" {
		return Event{}, false
	}
	if ref := parsePodPath(pathOf(ev.RequestURI)); ref.Pod != "" {
		ev.ObjectRef = &ObjectReference{Resource: "pods", Namespace: ref.Namespace, Name: ref.Pod, Subresource: ref.Subresource}
	}
	return ev, true
}

func setLegacyField(ev *Event, key, val string) {
	switch key {
	case "id":
		ev.AuditID = val
	case "stage":
		ev.Stage = val
	case "ip":
		if val != "" {
			ev.SourceIPs = strings.Split(val, ",")
		}
	case "method":
		ev.Verb = val
	case "user":
		if val != "<none>" {
			ev.User.Username = val
		}
	case "groups":
		ev.User.Groups = unquoteList(val)
	case "as":
		if val != "<self>" {
			ev.ImpersonatedUser = &UserInfo{Username: val}
		}
	case "asgroups":
		if ev.ImpersonatedUser != nil && val != "<lookup>" {
			ev.ImpersonatedUser.Groups = unquoteList(val)
		}
	case "user-agent":
		ev.UserAgent = val
	case "uri":
		ev.RequestURI = val
	case "response":
		if code, err := strconv.Atoi(val); err == nil {
			ev.ResponseStatus = &Status{Code: int32(code)}
		}
	}
}

// unquoteList reads `"a","b"`, the legacy encoding of a string list.
func unquoteList(s string) []string {
	var out []string
	for s != "" {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			break
		}
		if v, err := strconv.Unquote(q); err == nil {
			out = append(out, v)
		}
		s = strings.TrimPrefix(s[len(q):], ",")
	}
	return out
}

func pathOf(uri string) string {
	path, _, _ := strings.Cut(uri, "?")
	return path
}
