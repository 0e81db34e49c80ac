package delivery

import (
	"strings"
	"testing"
)

func TestParseSinkSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want SinkSpec
		err  string
	}{
		{in: "file:/var/log/alerts.jsonl", want: SinkSpec{Kind: KindFile, Path: "/var/log/alerts.jsonl"}},
		{in: "webhook:https://siem.example/hook?x=1", want: SinkSpec{Kind: KindWebhook, URL: "https://siem.example/hook?x=1"}},
		{in: "splunk-hec:https://splunk:8088/services/collector/event", want: SinkSpec{Kind: KindSplunkHEC, URL: "https://splunk:8088/services/collector/event"}},
		{in: "elasticsearch:http://es:9200", want: SinkSpec{Kind: KindElasticsearch, URL: "http://es:9200"}},
		{in: "syslog+udp://127.0.0.1:514", want: SinkSpec{Kind: KindSyslog, Network: "udp", Addr: "127.0.0.1:514", Format: FormatRFC5424, Facility: 16}},
		{in: "syslog+tcp://[::1]:601?format=cef", want: SinkSpec{Kind: KindSyslog, Network: "tcp", Addr: "[::1]:601", Format: FormatCEF, Facility: 16}},
		{in: "syslog+tls://siem:6514?facility=authpriv", want: SinkSpec{Kind: KindSyslog, Network: "tls", Addr: "siem:6514", Format: FormatRFC5424, Facility: 10}},
		{in: "file:", err: "no path"},
		{in: "webhook:ftp://x/", err: "scheme"},
		{in: "webhook:https:///nohost", err: "no host"},
		{in: "webhook:https://user:hunter2@siem/", err: "credentials"},
		{in: "syslog+quic://h:1", err: "not udp, tcp or tls"},
		{in: "syslog+tcp://h", err: "HOST:PORT"},
		{in: "syslog+tcp://h:0", err: "bad port"},
		{in: "syslog+tcp://h:99999", err: "bad port"},
		{in: "syslog+tcp://h:514/path", err: "want syslog+"},
		{in: "syslog+tcp://h:514?format=json", err: "bad option"},
		{in: "syslog+tcp://h:514?facility=nope", err: "unknown facility"},
		{in: "kafka:broker:9092", err: "unknown kind"},
		{in: "nothing", err: "want KIND:TARGET"},
	} {
		got, err := ParseSinkSpec(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("%q: error shows the password: %v", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseSinkSpec(f *testing.F) {
	for _, s := range []string{"file:/x", "webhook:https://h/p?q=1", "splunk-hec:http://h:8088/", "syslog+tls://h:6514?format=cef&facility=auth",
		"syslog+udp://[::1]:514", "elasticsearch:http://u:p@h/", "syslog+tcp://h:1/%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseSinkSpec(s)
		if err != nil {
			return
		}
		// A parsed spec re-parses to itself through its String form when
		// it has no query (String drops queries, which may hold secrets).
		if spec.Kind == KindSyslog || (spec.URL != "" && !strings.Contains(spec.URL, "?") && !strings.Contains(spec.URL, "#")) {
			again, err := ParseSinkSpec(spec.String())
			if err != nil {
				t.Fatalf("%q -> %q does not re-parse: %v", s, spec.String(), err)
			}
			if spec.Kind == KindSyslog && (again.Addr != spec.Addr || again.Network != spec.Network) {
				t.Fatalf("%q -> %+v -> %+v", s, spec, again)
			}
		}
	})
}

// TestSinkSpecStringHidesPathSecrets: a Slack-style webhook carries its
// credential in the path; the name logged and used in metrics must not.
func TestSinkSpecStringHidesPathSecrets(t *testing.T) {
	const secret = "T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX"
	a, err := ParseSinkSpec("webhook:https://hooks.example.com/services/" + secret + "?x=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ParseSinkSpec("webhook:https://hooks.example.com/services/other")
	root, _ := ParseSinkSpec("elasticsearch:https://es.example.com:9200/")
	for _, tc := range []struct {
		spec SinkSpec
		bad  []string
	}{
		{a, []string{"XXXX", "T0000", "services", "x=1"}},
		{b, []string{"other"}},
	} {
		if n := tc.spec.String(); !strings.HasPrefix(n, "webhook:https://hooks.example.com/path-sha256-") {
			t.Errorf("name %q: want the host and a path digest", n)
		} else {
			for _, s := range tc.bad {
				if strings.Contains(n, s) {
					t.Errorf("name %q shows %q", n, s)
				}
			}
		}
	}
	if a.String() == b.String() {
		t.Errorf("two sinks on one host share the name %q", a.String())
	}
	if n := root.String(); n != "elasticsearch:https://es.example.com:9200/" {
		t.Errorf("a URL with no path: name %q", n)
	}
}
