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
// keys. It is a function of the record alone; what a response adds (stage,
// code, end, annotations) does not change it. The Merger files an event
// under missingKey, which hands this the part of the event that is the
// same on every stage of its request.
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

// missingKey is the key an event without an auditID is filed under: the
// SyntheticRecordID of the request as the event alone tells it, so every
// reader of the event (two agents, two files, a store read back) files it
// under the same key whatever else it reads, and in whatever order.
//
// kube-apiserver writes each stage of a request as its own event, and logs
// the requestURI, verb, user, client, objectRef and received time on every
// stage, but a request body (requestObject) only on ResponseStarted and
// ResponseComplete, and only at level Request and above. The key of such
// an event leaves the body out, so RequestReceived and the later stages
// share it. A source that logs no requestURI (GKE's LogEntry, rebuilt from
// resourceName) writes one entry per request, whole: there the body is
// part of the record, and its command, container, stdin and tty are part
// of the key. The rule reads the event's own fields, not where it came
// from, so an event stored and parsed again keeps its key.
//
// Two native requests equal in all that every stage logs, told apart only
// by a body or a response code, share a key: nothing on a RequestReceived
// says which of them it belongs to. The Merger keeps them as two records
// under it, flagged audit_id_conflict.
func missingKey(ev *Event) string {
	e := *ev
	if e.RequestURI != "" {
		e.RequestObject = nil
	}
	r := newRecord(&e)
	r.RequestReceivedTimestamp = receivedTime(ev)
	return SyntheticRecordID(r)
}

// RecordID is the ID the event's record is kept under: its audit ID (in
// its bounded form, BoundAuditID), or for an event without one the
// synthetic key the Merger files it under (missingKey), so its stages stay
// beside that record as evidence.
func (ev *Event) RecordID() string {
	if ev.AuditID != "" {
		id, _ := BoundAuditID(ev.AuditID)
		return id
	}
	return missingKey(ev)
}
