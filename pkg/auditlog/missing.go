package auditlog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"
	"time"
)

// MissingIDPrefix starts the synthetic key a record without an auditID is
// filed under. The key is an identity for this process's bookkeeping, never
// an audit ID: records flagged missing_audit_id are never joined by ID.
const MissingIDPrefix = "missing-"

// SyntheticAuditID is the key an ID-less request had before
// SyntheticRecordID: a hash of the request URI, verb, user, received time
// and source IPs only. It cannot tell apart requests whose URI does not name
// the pod or command (GKE, stripped exports); use SyntheticRecordID.
func SyntheticAuditID(uri, verb, user string, received time.Time, sourceIPs []string) string {
	h := newKeyHash()
	h.str(uri)
	h.str(verb)
	h.str(user)
	h.str(received.UTC().Format(time.RFC3339Nano))
	h.str(strings.Join(sourceIPs, ","))
	return h.key()
}

// SyntheticRecordID derives the key of a request that came without an
// auditID from everything it asked for: "missing-" and the first 16 hex
// digits of SHA-256 over the verb, the user and impersonated user, the
// namespace, pod, subresource, container, command, env, ports, stdin and
// tty, the request URI, the received time and the client (source IPs, user
// agent). Two ID-less requests that differ in any of these get different
// keys. The Merger files a request under the key of what all its stages
// know (the query, not a request body only later stages log), so the
// stages of one request share it.
func SyntheticRecordID(r *ExecRecord) string {
	h := newKeyHash()
	h.str(r.Verb)
	h.user(&r.User)
	if r.ImpersonatedUser != nil {
		h.str("as")
		h.user(r.ImpersonatedUser)
	} else {
		h.str("")
	}
	h.str(r.Namespace)
	h.str(r.Pod)
	h.str(r.Subresource)
	h.str(r.Container)
	h.list(r.Command)
	h.list(r.Env)
	h.list(r.Ports)
	h.tri(r.Stdin)
	h.tri(r.TTY)
	h.str(r.RequestURI)
	h.str(r.RequestReceivedTimestamp.UTC().Format(time.RFC3339Nano))
	h.list(r.SourceIPs)
	h.str(r.UserAgent)
	return h.key()
}

// variantID is the key of an ID-less request whose synthetic key is held
// by another request that asked for something else (a command or container
// only its body names) or got another response code: the key and what
// tells the two apart.
func variantID(base string, r *ExecRecord, code int32) string {
	h := newKeyHash()
	h.str(base)
	h.str(r.Container)
	h.list(r.Command)
	h.list(r.Ports)
	h.tri(r.Stdin)
	h.tri(r.TTY)
	h.str(strconv.Itoa(int(code)))
	return h.key()
}

// keyHash writes length-prefixed fields, so no two field lists hash alike
// by shifting bytes from one field to the next.
type keyHash struct{ h hash.Hash }

func newKeyHash() keyHash { return keyHash{sha256.New()} }

func (k keyHash) str(s string) {
	var n [binary.MaxVarintLen64]byte
	k.h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	k.h.Write([]byte(s))
}

func (k keyHash) list(l []string) {
	k.str(strconv.Itoa(len(l)))
	for _, s := range l {
		k.str(s)
	}
}

func (k keyHash) tri(b *bool) {
	switch {
	case b == nil:
		k.str("")
	case *b:
		k.str("1")
	default:
		k.str("0")
	}
}

func (k keyHash) user(u *UserInfo) {
	k.str(u.Username)
	k.str(u.UID)
}

func (k keyHash) key() string {
	var sum [sha256.Size]byte
	return MissingIDPrefix + hex.EncodeToString(k.h.Sum(sum[:0])[:8])
}

// syntheticBase is the key of an ID-less event: SyntheticRecordID of its
// request as every stage logs it, without a request body.
func syntheticBase(ev *Event) string {
	bare := *ev
	bare.RequestObject = nil
	r := newRecord(&bare)
	r.RequestReceivedTimestamp = receivedTime(ev)
	return SyntheticRecordID(r)
}

// RecordID is the ID the event's record is kept under: its audit ID (in
// its bounded form, BoundAuditID), or for an event without one the
// synthetic key its record gets, so its stages stay beside that record as
// evidence. A request whose key another held first gets a variant the
// Merger alone can tell; RecordID gives the first.
func (ev *Event) RecordID() string {
	if ev.AuditID != "" {
		id, _ := BoundAuditID(ev.AuditID)
		return id
	}
	return syntheticBase(ev)
}
