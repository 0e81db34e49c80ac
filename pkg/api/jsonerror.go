package api

import (
	"bytes"
	"net/http"
	"strings"
)

// maxErrorText is how much of a plain-text error body is kept as the JSON
// error's message.
const maxErrorText = 1024

// jsonErrors rewrites error responses that are not JSON, such as the mux's
// 404 and 405 or http.Error from a wrapped handler, into writeError's
// shape: {"error": "..."}. Headers such as Allow and WWW-Authenticate stay.
func jsonErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonErrorWriter{ResponseWriter: w}
		h.ServeHTTP(jw, r)
		jw.finish()
	})
}

type jsonErrorWriter struct {
	http.ResponseWriter
	wroteHeader bool
	code        int // set when the body is being rewritten
	text        bytes.Buffer
}

func (w *jsonErrorWriter) WriteHeader(code int) {
	if w.wroteHeader {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.wroteHeader = true
	hdr := w.Header()
	if code >= http.StatusBadRequest && !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		w.code = code
		hdr.Set("Content-Type", "application/json")
		hdr.Del("Content-Length")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *jsonErrorWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.code == 0 {
		return w.ResponseWriter.Write(b)
	}
	if room := maxErrorText - w.text.Len(); room > 0 {
		w.text.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

// Unwrap lets http.ResponseController reach the connection.
func (w *jsonErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *jsonErrorWriter) finish() {
	if w.code == 0 {
		return
	}
	msg := strings.TrimSpace(w.text.String())
	if msg == "" {
		msg = strings.ToLower(http.StatusText(w.code))
	}
	w.code = 0
	encodeJSON(w.ResponseWriter, errorBody(msg))
}
