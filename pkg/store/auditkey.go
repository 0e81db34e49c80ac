package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// RequestKey is the digest of the request an audit record belongs to: its
// requestURI, verb, object, user, impersonated user, source IPs and
// requestReceivedTimestamp. Every stage of one request, and every
// redelivery of it, shares the key; a different request that reuses the
// audit ID (an Audit-ID header copied from a victim's environment) does
// not, so the store keeps it beside the victim's record instead of
// replacing it. An event that is not an audit event JSON object is keyed
// by the digest of its bytes.
func (r *AuditRecord) RequestKey() string {
	raw := []byte(r.Event)
	if len(raw) == 0 {
		raw = []byte("null")
	}
	var ev struct {
		RequestURI string          `json:"requestURI"`
		Verb       string          `json:"verb"`
		ObjectRef  json.RawMessage `json:"objectRef"`
		User       struct {
			Username string   `json:"username"`
			UID      string   `json:"uid"`
			Groups   []string `json:"groups"`
		} `json:"user"`
		ImpersonatedUser json.RawMessage `json:"impersonatedUser"`
		SourceIPs        []string        `json:"sourceIPs"`
		Received         string          `json:"requestReceivedTimestamp"`
	}
	if err := json.Unmarshal(raw, &ev); err != nil || ev.RequestURI == "" && ev.Received == "" {
		return digest(raw)
	}
	if t, err := time.Parse(time.RFC3339Nano, ev.Received); err == nil {
		ev.Received = t.UTC().Format(time.RFC3339Nano)
	}
	canon, err := json.Marshal([]any{ev.RequestURI, ev.Verb, compact(ev.ObjectRef), ev.User.Username,
		ev.User.UID, ev.User.Groups, compact(ev.ImpersonatedUser), ev.SourceIPs, ev.Received})
	if err != nil {
		return digest(raw)
	}
	return digest(canon)
}

// compact re-encodes a JSON value with sorted keys and no spacing, so that
// two framings of one object digest alike.
func compact(v json.RawMessage) any {
	if len(v) == 0 {
		return nil
	}
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return string(v)
	}
	return x
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
