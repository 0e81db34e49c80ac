package delivery

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Sink kinds.
const (
	KindFile          = "file"
	KindWebhook       = "webhook"
	KindSplunkHEC     = "splunk-hec"
	KindSyslog        = "syslog"
	KindElasticsearch = "elasticsearch"
)

// Syslog message bodies.
const (
	FormatRFC5424 = "rfc5424" // the alert message, with the alert in structured data
	FormatCEF     = "cef"     // a CEF:0 record as the message
)

// SinkSpec is a parsed sink specification:
//
//	file:PATH
//	webhook:URL          (http or https)
//	splunk-hec:URL       (the HEC event endpoint)
//	elasticsearch:URL
//	syslog+udp://HOST:PORT, syslog+tcp://HOST:PORT, syslog+tls://HOST:PORT,
//	  optionally ?format=cef&facility=auth
//
// URLs may not carry credentials (user:password@); tokens come from files.
type SinkSpec struct {
	Kind string
	// Path is the file sink's path.
	Path string
	// URL is the webhook, HEC or Elasticsearch endpoint.
	URL string
	// Network (udp, tcp or tls), Addr (host:port), Format and Facility
	// are the syslog sink's.
	Network  string
	Addr     string
	Format   string
	Facility int
}

// syslogFacilities are RFC 5424's facility names.
var syslogFacilities = map[string]int{
	"kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6, "news": 7,
	"uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11, "local0": 16, "local1": 17, "local2": 18,
	"local3": 19, "local4": 20, "local5": 21, "local6": 22, "local7": 23,
}

// ParseSinkSpec parses a sink specification. Errors never repeat the URL,
// which could hold a secret.
func ParseSinkSpec(spec string) (SinkSpec, error) {
	if strings.HasPrefix(spec, "syslog+") {
		return parseSyslogSpec(spec)
	}
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return SinkSpec{}, errors.New("parsing sink: want KIND:TARGET (file, webhook, splunk-hec, elasticsearch) or syslog+PROTO://HOST:PORT")
	}
	switch kind {
	case KindFile:
		if rest == "" || strings.ContainsRune(rest, 0) {
			return SinkSpec{}, errors.New("parsing file sink: no path")
		}
		return SinkSpec{Kind: KindFile, Path: rest}, nil
	case KindWebhook, KindSplunkHEC, KindElasticsearch:
		u, err := parseHTTPURL(rest)
		if err != nil {
			return SinkSpec{}, fmt.Errorf("parsing %s sink: %w", kind, err)
		}
		return SinkSpec{Kind: kind, URL: u.String()}, nil
	}
	return SinkSpec{}, fmt.Errorf("parsing sink: unknown kind %q", truncate(kind, 32))
}

func parseHTTPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL
		}
		return nil, fmt.Errorf("invalid URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("URL scheme must be http or https")
	}
	if u.Host == "" {
		return nil, errors.New("URL has no host")
	}
	if _, ok := u.User.Password(); ok || u.User != nil {
		return nil, errors.New("URL carries credentials; use a token file")
	}
	return u, nil
}

func parseSyslogSpec(spec string) (SinkSpec, error) {
	u, err := url.Parse(spec)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return SinkSpec{}, fmt.Errorf("parsing syslog sink: %w", err)
	}
	s := SinkSpec{Kind: KindSyslog, Network: strings.TrimPrefix(u.Scheme, "syslog+"), Format: FormatRFC5424, Facility: 16}
	if s.Network != "udp" && s.Network != "tcp" && s.Network != "tls" {
		return SinkSpec{}, fmt.Errorf("parsing syslog sink: protocol %q is not udp, tcp or tls", truncate(s.Network, 16))
	}
	if u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return SinkSpec{}, errors.New("parsing syslog sink: want syslog+PROTO://HOST:PORT")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return SinkSpec{}, errors.New("parsing syslog sink: want HOST:PORT")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return SinkSpec{}, errors.New("parsing syslog sink: bad port")
	}
	s.Addr = net.JoinHostPort(host, port)
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return SinkSpec{}, errors.New("parsing syslog sink: bad query")
	}
	for k, v := range q {
		switch {
		case k == "format" && len(v) == 1 && (v[0] == FormatRFC5424 || v[0] == FormatCEF):
			s.Format = v[0]
		case k == "facility" && len(v) == 1:
			f, ok := syslogFacilities[v[0]]
			if !ok {
				return SinkSpec{}, fmt.Errorf("parsing syslog sink: unknown facility %q", truncate(v[0], 16))
			}
			s.Facility = f
		default:
			return SinkSpec{}, fmt.Errorf("parsing syslog sink: bad option %q (want format=rfc5424|cef, facility=NAME)", truncate(k, 16))
		}
	}
	return s, nil
}

// String is the spec without secrets: URLs lose their query, and their
// path, which Slack- and Discord-style webhooks use as the credential, is
// replaced by a short digest that still tells two sinks apart in logs.
func (s SinkSpec) String() string {
	switch s.Kind {
	case KindFile:
		return "file:" + s.Path
	case KindSyslog:
		return "syslog+" + s.Network + "://" + s.Addr
	}
	if u, err := url.Parse(s.URL); err == nil {
		u.RawQuery, u.User, u.Fragment = "", nil, ""
		if p := u.EscapedPath(); p != "" && p != "/" {
			sum := sha256.Sum256([]byte(p))
			u.Path, u.RawPath = "/path-sha256-"+hex.EncodeToString(sum[:4]), ""
		}
		return s.Kind + ":" + u.String()
	}
	return s.Kind
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
