package auditlog

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"
)

// The apiserver takes a request's Audit-ID header verbatim, up to the
// header limit (1 MiB), so one client can make every record, index entry
// and stored row it touches that large. IDs longer than MaxAuditIDBytes
// are kept in a bounded form: a prefix and a hash of the whole ID, so two
// long IDs stay apart and the same long ID always maps to the same form.

// MaxAuditIDBytes bounds the audit ID kept per record. A UUID is 36 bytes.
const MaxAuditIDBytes = 256

// cutIDMark sits between the kept prefix and the hash of a bounded ID.
const cutIDMark = "~sha256:"

// cutIDHashHex is how many hex digits of the SHA-256 a bounded ID keeps.
const cutIDHashHex = 32

// BoundAuditID returns id, or when it is over MaxAuditIDBytes its bounded
// form: its first bytes (cut on a UTF-8 boundary), "~sha256:" and 32 hex
// digits of the SHA-256 of the whole ID, MaxAuditIDBytes at most. cut
// reports whether id was replaced.
func BoundAuditID(id string) (bounded string, cut bool) {
	if len(id) <= MaxAuditIDBytes {
		return id, false
	}
	n := MaxAuditIDBytes - len(cutIDMark) - cutIDHashHex
	for n > 0 && !utf8.RuneStart(id[n]) {
		n--
	}
	sum := sha256.Sum256([]byte(id))
	return id[:n] + cutIDMark + hex.EncodeToString(sum[:])[:cutIDHashHex], true
}

// boundEventID replaces an over-long AuditID by its bounded form; it
// reports whether it did.
func boundEventID(ev *Event) bool {
	id, cut := BoundAuditID(ev.AuditID)
	if cut {
		ev.AuditID, ev.idCut = id, true
	}
	return cut
}
