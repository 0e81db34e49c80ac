package auditlog

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// MissingIDPrefix starts the synthetic key a record without an auditID is
// filed under. The key is an identity for this process's bookkeeping, never
// an audit ID: records flagged missing_audit_id are never joined by ID.
const MissingIDPrefix = "missing-"

// SyntheticAuditID derives the key of a request that came without an
// auditID from what all its stages share: "missing-" and the first 16 hex
// digits of SHA-256 over the request URI, verb, user, received time
// (RFC 3339, nanoseconds) and source IPs. Two ID-less requests differ in
// one of these unless they are the same request seen twice.
func SyntheticAuditID(uri, verb, user string, received time.Time, sourceIPs []string) string {
	h := sha256.New()
	for _, s := range []string{uri, verb, user, received.UTC().Format(time.RFC3339Nano), strings.Join(sourceIPs, ",")} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	return MissingIDPrefix + hex.EncodeToString(h.Sum(sum[:0])[:8])
}

// syntheticID is the key of an ID-less event.
func syntheticID(ev *Event) string {
	return SyntheticAuditID(ev.RequestURI, ev.Verb, ev.User.Username, receivedTime(ev), ev.SourceIPs)
}

// RecordID is the ID the event's record is kept under: its audit ID, or for
// an event without one the synthetic key its record gets (SyntheticAuditID),
// so its stages stay beside that record as evidence.
func (ev *Event) RecordID() string {
	if ev.AuditID != "" {
		return ev.AuditID
	}
	return syntheticID(ev)
}
