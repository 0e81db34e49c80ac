package alert

import (
	"strconv"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/join"
)

// fieldNames are the $(field) names a message template may use. Values are
// inserted as data: Expand never looks inside them.
var fieldNames = []string{
	"rule", "severity", "description", "matched",
	"user", "impersonatedUser", "userUID", "groups", "sourceIP", "userAgent",
	"namespace", "pod", "container", "command", "envNames", "tty", "stdin",
	"argv", "filename", "pid", "ppid", "processUID", "attribution", "flags",
	"auditID", "claimedAuditID", "processID", "containerID", "claimedUser",
	"requestURI", "reusedAuditID", "otherUsers", "otherRequests", "waited", "settledBy",
}

// knownField reports whether a template may refer to name; label.KEY
// refers to a pod label.
func knownField(name string) bool {
	if k, ok := strings.CutPrefix(name, "label."); ok {
		return k != ""
	}
	for _, f := range fieldNames {
		if f == name {
			return true
		}
	}
	return false
}

// field returns a template field's value; ok is false for a label that is
// not known, which Expand then leaves verbatim.
func (in *Input) field(r *Rule, matched, name string) (string, bool) {
	s, p := in.Session, in.Process
	switch name {
	case "rule":
		return r.Name, true
	case "severity":
		return r.Severity, true
	case "description":
		return r.Description, true
	case "matched":
		return matched, true
	case "user":
		if s != nil {
			return s.User.Username, true
		}
	case "impersonatedUser":
		if s != nil && s.ImpersonatedUser != nil {
			return s.ImpersonatedUser.Username, true
		}
	case "userUID":
		if s != nil {
			return s.User.UID, true
		}
	case "groups":
		return strings.Join(in.groups(), ","), true
	case "sourceIP":
		if s != nil && len(s.SourceIPs) > 0 {
			return s.SourceIPs[0], true
		}
	case "userAgent":
		if s != nil {
			return s.UserAgent, true
		}
	case "namespace", "pod", "container":
		return strings.Join(in.where(name), ","), true
	case "command":
		if s != nil {
			return strings.Join(s.Command, " "), true
		}
	case "envNames":
		return strings.Join(in.envNames(), ","), true
	case "tty":
		if s != nil {
			return triBool(s.TTY), true
		}
		return "false", true
	case "stdin":
		if s != nil {
			return triBool(s.Stdin), true
		}
		return "false", true
	case "argv":
		if p != nil {
			return strings.Join(p.Argv, " "), true
		}
	case "filename":
		if p != nil {
			return p.Filename, true
		}
	case "pid":
		if p != nil {
			return strconv.FormatUint(uint64(p.PID), 10), true
		}
	case "ppid":
		if p != nil {
			return strconv.FormatUint(uint64(p.PPID), 10), true
		}
	case "processUID":
		if p != nil {
			return strconv.FormatUint(uint64(p.UID), 10), true
		}
	case "attribution":
		if p != nil {
			return string(p.Attribution), true
		}
	case "flags":
		return strings.Join(in.flags(), ","), true
	case "auditID":
		return in.auditID(), true
	case "claimedAuditID":
		if p != nil {
			return p.ClaimedAuditID, true
		}
	case "processID":
		if p != nil {
			return p.ProcessID, true
		}
	case "containerID":
		if p != nil {
			return p.ContainerID, true
		}
	case "claimedUser":
		if c := in.claimed(); c != nil {
			return displayUser(c), true
		}
	case "requestURI":
		if s != nil {
			return s.RequestURI, true
		}
	case "reusedAuditID":
		// The apiserver's audit ID of the session, which its other
		// requests share (the session's own key may be derived).
		if s != nil && len(s.Conflicts) > 0 {
			return s.Conflicts[0].AuditID, true
		}
		return in.auditID(), true
	case "otherUsers":
		return strings.Join(in.otherUsers(), ","), true
	case "otherRequests":
		return in.otherRequests(), true
	case "waited":
		return in.Settled.waited(), true
	case "settledBy":
		if in.Settled != nil {
			return in.Settled.By, true
		}
	default:
		if k, ok := strings.CutPrefix(name, "label."); ok {
			v, ok := in.Labels[k]
			return v, ok
		}
		return "", false
	}
	return "", true // a known field the input lacks: empty
}

// otherRequests describes the session's other requests under its audit ID:
// who, when, and what each asked.
func (in *Input) otherRequests() string {
	if in.Session == nil {
		return ""
	}
	var parts []string
	for i := range in.Session.Conflicts {
		c := &in.Session.Conflicts[i]
		parts = append(parts, displayUser(&join.Session{ExecRecord: *c})+" at "+
			c.RequestReceivedTimestamp.UTC().Format(time.RFC3339Nano)+": "+c.RequestURI)
	}
	return strings.Join(parts, "; ")
}

// displayUser is a session's username, with " as NAME" when it
// impersonated NAME.
func displayUser(s *join.Session) string {
	if s.ImpersonatedUser != nil {
		return s.User.Username + " as " + s.ImpersonatedUser.Username
	}
	return s.User.Username
}

// auditID is the session's ID, else the process's; never a claimed one.
func (in *Input) auditID() string {
	if in.Session != nil && in.Session.AuditID != "" {
		return in.Session.AuditID
	}
	if in.Process != nil {
		return in.Process.AuditID
	}
	return ""
}

// triBool renders a flag the audit log may leave unsaid (GKE): "unknown".
func triBool(b *bool) string {
	if b == nil {
		return "unknown"
	}
	return strconv.FormatBool(*b)
}
