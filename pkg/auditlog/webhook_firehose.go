package auditlog

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Amazon Data Firehose delivers to an HTTP endpoint as a POST whose body is
// {"requestId", "timestamp", "records": [{"data": "<base64>"}]}
// (https://docs.aws.amazon.com/firehose/latest/dev/httpdeliveryrequestresponse.html).
// On EKS the records hold CloudWatch Logs subscription data from the
// cluster's log group, gzip'd unless the stream decompresses it; the
// Parser reads them (records, firehoseRecord). The sender authenticates
// with the access key configured on the stream, sent in
// X-Amz-Firehose-Access-Key, and expects a JSON answer naming the request.

// Firehose request headers.
const (
	firehoseRequestIDHeader = "X-Amz-Firehose-Request-Id"
	firehoseProtocolHeader  = "X-Amz-Firehose-Protocol-Version"
	firehoseAccessKeyHeader = "X-Amz-Firehose-Access-Key"
)

// maxFirehoseRequestID bounds the request ID echoed back.
const maxFirehoseRequestID = 256

// isFirehose tells a Firehose delivery by its headers.
func isFirehose(r *http.Request) bool {
	return r.Header.Get(firehoseRequestIDHeader) != "" || r.Header.Get(firehoseProtocolHeader) != ""
}

// firehose reports whether Firehose deliveries can be accepted at all.
func (c WebhookConfig) firehose() bool {
	return c.FirehoseKeys != nil || c.FirehoseAccessKey != ""
}

// senderOK authenticates a request. A Firehose delivery must carry a
// configured access key (none configured: refused). Any other request
// must present a bearer token when tokens are configured; on a receiver
// configured for Firehose alone (no tokens, no client CA) it is refused,
// since nothing else checks it. The standalone server refuses to listen
// off loopback with no check at all.
func (h *WebhookHandler) senderOK(r *http.Request) bool {
	c := h.cfg
	switch {
	case isFirehose(r):
		return h.firehoseKeyOK(r.Header.Get(firehoseAccessKeyHeader))
	case c.Tokens != nil || c.BearerToken != "":
		return h.tokenOK(r.Header.Get("Authorization"))
	case c.firehose() && c.ClientCAFile == "":
		return false
	}
	return true
}

// firehoseKeyOK compares in constant time, whatever the lengths; the key
// is never logged.
func (h *WebhookHandler) firehoseKeyOK(key string) bool {
	if key == "" {
		return false
	}
	if h.cfg.FirehoseKeys != nil {
		return h.cfg.FirehoseKeys.Accepts(key)
	}
	if h.cfg.FirehoseAccessKey == "" {
		return false
	}
	got, want := sha256.Sum256([]byte(key)), sha256.Sum256([]byte(h.cfg.FirehoseAccessKey))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// firehoseResponse is the answer Firehose expects, on success and failure.
type firehoseResponse struct {
	RequestID    string `json:"requestId"`
	Timestamp    int64  `json:"timestamp"`
	ErrorMessage string `json:"errorMessage,omitempty"`
}

// replyFirehose answers a Firehose delivery: 200 with the request's ID
// once the events are taken in; any other code makes Firehose retry, then
// back the records up to S3.
func replyFirehose(w http.ResponseWriter, r *http.Request, code int, msg string) {
	id := strings.ToValidUTF8(r.Header.Get(firehoseRequestIDHeader), "")
	if len(id) > maxFirehoseRequestID {
		id = ""
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(firehoseResponse{RequestID: id, Timestamp: time.Now().UnixMilli(), ErrorMessage: msg})
}
