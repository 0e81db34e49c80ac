package agent

import "github.com/execid/correlator/pkg/auditlog"

// Rough heap costs of a queued audit event beyond its strings.
const (
	eventFixedBytes = 512
	pairBytes       = 48
)

// eventsBytes estimates the heap a batch of parsed events holds, for the
// audit queue's byte bound.
func eventsBytes(evs []auditlog.Event) int64 {
	var n int
	for i := range evs {
		ev := &evs[i]
		n += eventFixedBytes + len(ev.AuditID) + len(ev.Stage) + len(ev.RequestURI) + len(ev.Verb) +
			len(ev.UserAgent) + len(ev.RequestObject) + userBytes(&ev.User)
		if ev.ImpersonatedUser != nil {
			n += userBytes(ev.ImpersonatedUser)
		}
		for _, s := range ev.SourceIPs {
			n += 16 + len(s)
		}
		for k, v := range ev.Annotations {
			n += pairBytes + len(k) + len(v)
		}
		if r := ev.ObjectRef; r != nil {
			n += len(r.Resource) + len(r.Namespace) + len(r.Name) + len(r.UID) + len(r.APIGroup) + len(r.APIVersion) + len(r.Subresource)
		}
		if s := ev.ResponseStatus; s != nil {
			n += len(s.Status) + len(s.Message) + len(s.Reason)
		}
	}
	return int64(n)
}

func userBytes(u *auditlog.UserInfo) int {
	n := len(u.Username) + len(u.UID)
	for _, g := range u.Groups {
		n += 16 + len(g)
	}
	for k, vs := range u.Extra {
		n += pairBytes + len(k)
		for _, v := range vs {
			n += 16 + len(v)
		}
	}
	return n
}
