package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Handler serves MutatePath: it reads an AdmissionReview, decides, and
// always answers allowed (a body over the bound gets 413, so the webhook's
// failurePolicy decides). It never logs the command, which can hold
// secrets.
type Handler struct {
	mut     *Mutator
	maxBody int64
	log     zerolog.Logger
	m       *Metrics
}

// NewHandler returns the webhook handler; m may be nil.
func NewHandler(mut *Mutator, maxBody int64, log zerolog.Logger, m *Metrics) *Handler {
	return &Handler{mut: mut, maxBody: maxBody, log: log, m: m}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.m.failed(ErrBodyTooLarge)
			h.log.Warn().Int64("max_bytes", h.maxBody).Msg("admission review over the body bound; the failurePolicy decides")
			http.Error(w, "admission review too large", http.StatusRequestEntityTooLarge)
			return
		}
		h.m.failed(ErrMalformed)
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	req, d := h.decide(r, body)
	resp := &admissionv1.AdmissionResponse{Allowed: true}
	if req != nil {
		resp.UID = req.UID
	}
	if d.Patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = d.Patch, &pt
		// The apiserver stores it as "<webhook name>/<key>".
		resp.AuditAnnotations = map[string]string{h.mut.Key(): d.ID}
	}
	out := admissionv1.AdmissionReview{Response: resp}
	out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	b, err := json.Marshal(&out)
	if err != nil { // only plain types: cannot happen, but never panic
		http.Error(w, "encoding response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	h.m.decided(d, time.Since(start))
	h.logDecision(req, d)
}

// decide decodes body and decides; an unreadable review is allowed with
// the UID when one can be read.
func (h *Handler) decide(r *http.Request, body []byte) (*admissionv1.AdmissionRequest, Decision) {
	var review admissionv1.AdmissionReview
	err := json.Unmarshal(body, &review)
	if err == nil && review.Request == nil {
		err = errNoRequest
	}
	if err != nil {
		var uidOnly struct {
			Request struct {
				UID types.UID `json:"uid"`
			} `json:"request"`
		}
		_ = json.Unmarshal(body, &uidOnly)
		d := Decision{Kind: KindOther}
		d.fail(ErrMalformed, fmt.Errorf("decoding admission review: %w", err))
		return &admissionv1.AdmissionRequest{UID: uidOnly.Request.UID}, d
	}
	return review.Request, h.mut.Decide(r.Context(), review.Request)
}

func (h *Handler) logDecision(req *admissionv1.AdmissionRequest, d Decision) {
	var ev *zerolog.Event
	switch {
	case d.Err != nil:
		ev = h.log.Warn().Err(d.Err).Str("error_reason", d.Error)
	case d.Patch != nil:
		ev = h.log.Info()
	default:
		ev = h.log.Debug()
	}
	ev = ev.Str("kind", string(d.Kind)).Str("namespace", req.Namespace).Str("pod", req.Name).
		Str("container", d.Container).Str("user", req.UserInfo.Username).Str("uid", string(req.UID))
	if d.ID != "" {
		ev = ev.Str("id", d.ID)
	}
	if d.Skip != "" {
		ev = ev.Str("skip", d.Skip)
	}
	if len(d.CallerKey) > 0 {
		ev = ev.Strs("caller_key", d.CallerKey)
	}
	switch {
	case d.Patch != nil:
		ev.Msg("exec id injected")
	case d.Err != nil:
		ev.Msg("admission request allowed unchanged")
	default:
		ev.Msg("admission request skipped")
	}
}
