package delivery

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// sdID is the structured-data ID of correlator's SD element. 32473 is the
// private enterprise number RFC 5612 reserves for documentation; a site
// with its own number can rewrite it at the receiver.
const sdID = "correlator@32473"

// syslogSeverity maps alert severities to RFC 5424 severities.
func syslogSeverity(sev string) int {
	switch sev {
	case "critical":
		return 2
	case "high":
		return 3
	case "medium":
		return 4
	case "low":
		return 5
	}
	return 6
}

// cefSeverity maps alert severities to CEF's 0-10.
func cefSeverity(sev string) int {
	switch sev {
	case "critical":
		return 10
	case "high":
		return 8
	case "medium":
		return 5
	case "low":
		return 3
	}
	return 1
}

// alertContext is what the syslog and CEF bodies take from the payload:
// pkg/alert's Input, as JSON.
type alertContext struct {
	Session *join.Session `json:"session"`
	Process *join.Process `json:"process"`
	// Settled: how the process's attribution settled before a rule that
	// reads it judged, and how long the alert waited for that.
	Settled *alert.Settled `json:"settled"`
}

// waited is how long the alert waited for the attribution to settle, in
// seconds, and what settled it; empty for an alert that did not wait.
func (c *alertContext) waited() (seconds, by string) {
	if c.Settled == nil {
		return "", ""
	}
	return strconv.FormatFloat(c.Settled.AfterSeconds, 'f', -1, 64), c.Settled.By
}

func (c *alertContext) user() string {
	if c.Session != nil {
		return c.Session.User.Username
	}
	return ""
}

func (c *alertContext) location() (ns, pod, ctr string) {
	if c.Session != nil {
		return c.Session.Namespace, c.Session.Pod, c.Session.Container
	}
	if c.Process != nil {
		return c.Process.Namespace, c.Process.Pod, c.Process.Container
	}
	return "", "", ""
}

// header returns s as an RFC 5424 header field: printable US-ASCII, at
// most n bytes, "-" when empty.
func header(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 33 || r > 126 {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n]
	}
	if s == "" {
		return "-"
	}
	return s
}

// sdEscape escapes an SD-PARAM value (RFC 5424 6.3.3) and makes it UTF-8.
func sdEscape(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, `]`, `\]`).Replace(s)
}

// formatSyslog renders one alert as an RFC 5424 message (without
// transport framing). body is FormatRFC5424 (the alert message) or
// FormatCEF. maxLen, if > 0, truncates the MSG part to fit.
func formatSyslog(a *store.Alert, facility int, host, procID, version, body string, maxLen int) []byte {
	var ctx alertContext
	_ = json.Unmarshal(a.Payload, &ctx) // an alert without a payload still formats
	ns, pod, _ := ctx.location()
	var b []byte
	b = append(b, '<')
	b = strconv.AppendInt(b, int64(facility*8+syslogSeverity(a.Severity)), 10)
	b = append(b, ">1 "...)
	t := eventTime(a)
	if t.IsZero() {
		t = time.Now()
	}
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, ' ')
	b = append(b, header(host, 255)...)
	b = append(b, " correlator "...)
	b = append(b, header(procID, 128)...)
	b = append(b, ' ')
	b = append(b, header(a.Rule, 32)...)
	b = append(b, " ["+sdID...)
	waited, settledBy := ctx.waited()
	params := [][2]string{{"id", a.ID}, {"rule", a.Rule}, {"severity", a.Severity}, {"auditID", a.AuditID},
		{"processID", a.ProcessID}, {"user", ctx.user()}, {"namespace", ns}, {"pod", pod},
		{"waited", waited}, {"settledBy", settledBy}}
	if resolution(a) {
		params = append(params, [2]string{"status", a.Status}, [2]string{"resolvedAt", timeField(a.ResolvedAt)},
			[2]string{"resolution", a.Resolution}, [2]string{"raisedAt", timeField(a.Time)})
	}
	for _, p := range params {
		if p[1] == "" {
			continue
		}
		b = append(b, ' ')
		b = append(b, p[0]...)
		b = append(b, `="`...)
		b = append(b, sdEscape(p[1])...)
		b = append(b, '"')
	}
	b = append(b, "] \xef\xbb\xbf"...) // the BOM: MSG is UTF-8
	msg := strings.ToValidUTF8(headline(a), "\uFFFD")
	if body == FormatCEF {
		msg = formatCEF(a, &ctx, version)
	}
	if maxLen > 0 && len(b)+len(msg) > maxLen {
		msg = truncateUTF8(msg, max(maxLen-len(b), 0))
	}
	return append(b, msg...)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

var (
	cefHeaderEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`, "\r", " ", "\n", " ")
	cefExtEscaper    = strings.NewReplacer(`\`, `\\`, `=`, `\=`, "\r", `\r`, "\n", `\n`)
)

// formatCEF renders an alert as a CEF:0 record: header fields escape \ and
// |, extension values escape \, = and line breaks.
func formatCEF(a *store.Alert, ctx *alertContext, version string) string {
	if version == "" {
		version = "dev"
	}
	h := func(s string) string { return cefHeaderEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD")) }
	var b strings.Builder
	b.WriteString("CEF:0|correlator|correlator|")
	for _, f := range []string{version, a.Rule, headline(a)} {
		b.WriteString(h(f))
		b.WriteByte('|')
	}
	b.WriteString(strconv.Itoa(cefSeverity(a.Severity)))
	b.WriteByte('|')
	ns, pod, ctr := ctx.location()
	ext := [][2]string{
		{"rt", strconv.FormatInt(eventTime(a).UnixMilli(), 10)},
		{"externalId", a.ID},
		{"suser", ctx.user()},
		{"cs1Label", "auditID"}, {"cs1", a.AuditID},
		{"cs2Label", "processID"}, {"cs2", a.ProcessID},
		{"cs3Label", "namespace"}, {"cs3", ns},
		{"cs4Label", "pod"}, {"cs4", pod},
		{"cs5Label", "container"}, {"cs5", ctr},
	}
	if s := ctx.Session; s != nil {
		if s.ImpersonatedUser != nil {
			ext = append(ext, [2]string{"duser", s.ImpersonatedUser.Username})
		}
		if len(s.SourceIPs) > 0 {
			ext = append(ext, [2]string{"src", s.SourceIPs[0]})
		}
		ext = append(ext, [2]string{"cs6Label", "command"}, [2]string{"cs6", strings.Join(s.Command, " ")})
	}
	if p := ctx.Process; p != nil {
		ext = append(ext, [2]string{"dproc", p.Filename}, [2]string{"dpid", strconv.FormatUint(uint64(p.PID), 10)})
	}
	if waited, by := ctx.waited(); by != "" {
		ext = append(ext, [2]string{"cfp1Label", "waitedSeconds"}, [2]string{"cfp1", waited},
			[2]string{"flexString1Label", "settledBy"}, [2]string{"flexString1", by})
	}
	if resolution(a) {
		// rt is when it was resolved; start is when the alert was raised.
		ext = append(ext, [2]string{"act", a.Status}, [2]string{"reason", a.Resolution})
		if !a.Time.IsZero() {
			ext = append(ext, [2]string{"start", strconv.FormatInt(a.Time.UnixMilli(), 10)})
		}
	}
	sep := ""
	for _, kv := range ext {
		if kv[1] == "" {
			continue
		}
		b.WriteString(sep + kv[0] + "=" + cefExtEscaper.Replace(strings.ToValidUTF8(kv[1], "\uFFFD")))
		sep = " "
	}
	return b.String()
}
