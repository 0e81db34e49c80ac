package auditlog

import (
	"net/url"
	"strings"
)

// StreamParams are the query parameters of an exec/attach/portforward URI.
type StreamParams struct {
	Command   []string
	Env       []string // KEP-6035 `kubectl exec --env`: "NAME=value"
	Ports     []string
	Container string
	// Stdin and TTY are nil when the query does not name them.
	Stdin *bool
	TTY   *bool
	// DecodeError is set when some parameter was not valid percent-encoding;
	// its raw text is kept.
	DecodeError bool
}

// PathRef is what the path of a pod subresource URI names.
type PathRef struct {
	Namespace   string
	Pod         string
	Subresource string
}

// parseRequestURI splits a requestURI (already JSON-unescaped) into the pod it
// names and its streaming parameters. Repeated command=, env= and ports= keep
// their order; the first container= wins, as in the apiserver.
func parseRequestURI(uri string) (PathRef, StreamParams) {
	var p StreamParams
	path, query, _ := strings.Cut(uri, "?")
	ref := parsePodPath(path)
	for query != "" {
		var kv string
		kv, query, _ = strings.Cut(query, "&")
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		k, kErr := queryUnescape(k)
		v, vErr := queryUnescape(v)
		if kErr || vErr {
			p.DecodeError = true
		}
		switch k {
		case "command":
			p.Command = append(p.Command, v)
		case "env":
			p.Env = append(p.Env, v)
		case "ports", "port":
			p.Ports = append(p.Ports, v)
		case "container":
			if p.Container == "" {
				p.Container = v
			}
		case "stdin":
			p.Stdin = boolPtr(isTrue(v))
		case "tty":
			p.TTY = boolPtr(isTrue(v))
		}
	}
	return ref, p
}

// parsePodPath reads /api/v1/namespaces/<ns>/pods/<name>/<sub>, the only
// shape the legacy text format gives for the target.
func parsePodPath(path string) PathRef {
	const prefix = "/api/v1/namespaces/"
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return PathRef{}
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 3 || parts[1] != "pods" || parts[0] == "" || parts[2] == "" {
		return PathRef{}
	}
	ref := PathRef{Namespace: unescapePath(parts[0]), Pod: unescapePath(parts[2])}
	if len(parts) > 3 {
		ref.Subresource = parts[3]
	}
	return ref
}

func unescapePath(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// queryUnescape is url.QueryUnescape that keeps the raw text on error.
func queryUnescape(s string) (string, bool) {
	if !strings.ContainsAny(s, "%+") {
		return s, false
	}
	u, err := url.QueryUnescape(s)
	if err != nil {
		return s, true
	}
	return u, false
}

// isTrue follows strconv.ParseBool, which the apiserver uses for these flags.
func isTrue(v string) bool {
	switch v {
	case "1", "t", "T", "true", "TRUE", "True":
		return true
	}
	return false
}

func boolPtr(b bool) *bool { return &b }
