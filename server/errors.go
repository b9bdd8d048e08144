package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// Route-level codes. They are not decision errors, so the engine does not
// know them; like every code they are API and never renamed.
const (
	CodeNotFound         engine.Code = "not_found"
	CodeMethodNotAllowed engine.Code = "method_not_allowed"
	// CodeOverloaded refuses a request that admission control cannot take
	// now (bytes or JSON values in flight past their budget, or a decision
	// log that cannot keep up): 503 with Retry-After.
	CodeOverloaded engine.Code = "overloaded"
	// CodeRequestTimeout answers a body that was not fully received: the
	// read deadline passed or the client went away.
	CodeRequestTimeout engine.Code = "request_timeout"
)

// RetryAfterSeconds is the Retry-After of an overloaded answer: requests in
// flight finish within about a second, or time out.
const RetryAfterSeconds = 1

// statusOf is the one code -> HTTP status table.
var statusOf = map[engine.Code]int{
	engine.CodeMalformedJSON:        http.StatusBadRequest,
	engine.CodeInputSchemaInvalid:   http.StatusBadRequest,
	engine.CodeUnknownDecision:      http.StatusNotFound,
	engine.CodeBodyTooLarge:         http.StatusRequestEntityTooLarge,
	engine.CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	engine.CodeUnauthorized:         http.StatusUnauthorized,
	engine.CodeNotReady:             http.StatusServiceUnavailable,
	engine.CodePolicyError:          http.StatusInternalServerError,
	engine.CodePolicyTimeout:        http.StatusInternalServerError,
	CodeNotFound:                    http.StatusNotFound,
	CodeMethodNotAllowed:            http.StatusMethodNotAllowed,
	CodeOverloaded:                  http.StatusServiceUnavailable,
	CodeRequestTimeout:              http.StatusRequestTimeout,
	CodeBadRequest:                  http.StatusBadRequest, // the shadow routes' codes (shadow.go)
	CodeForbidden:                   http.StatusForbidden,
	CodeCandidateRefused:            http.StatusUnprocessableEntity,
	CodeNoCandidate:                 http.StatusNotFound,
	CodePromotionRefused:            http.StatusConflict,
}

// statusFor returns the HTTP status of a code. A code missing from the table
// is an internal failure: 500, never a success.
func statusFor(c engine.Code) int {
	if s, ok := statusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// writeError is the only writer of error responses: the contract's error
// document, with the status of its code. Headers a code needs
// (WWW-Authenticate, Allow) are set by the caller before; Retry-After is set
// here.
//
// On OPA's Data API path (dataAPI) the document also carries OPA's own error
// fields, so that OPA's clients raise their typed errors (the TypeScript
// SDK's ClientError on a 400, ServerError on a 500): "code" and "message"
// (the contract's), "errors" (one per violation, or the error itself) and
// "decision_id".
func writeError(w http.ResponseWriter, e *engine.Error, dataAPI bool, decisionID string) {
	var doc any = e.Document()
	if dataAPI {
		doc = opaDocument(e, decisionID)
	}
	body, err := json.Marshal(doc)
	if err != nil { // cannot happen for strings; keep the answer well-formed anyway
		body = []byte(`{"error":{"code":"policy_error","message":"encoding the error failed"}}`)
	}
	if e.Code == CodeOverloaded {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	writeBody(w, statusFor(e.Code), body)
}

// opaError is OPA's error body (v1/server/types.ErrorV1) beside the
// contract's error document.
type opaError struct {
	Code       engine.Code         `json:"code"`
	Message    string              `json:"message"`
	Errors     []opaErrorItem      `json:"errors"`
	DecisionID string              `json:"decision_id,omitempty"`
	Error      engine.DocumentBody `json:"error"`
}

// opaErrorItem is one of OPA's "errors": code and message (OPA adds a Rego
// location, which an input violation does not have; its message starts with
// the violation's JSON pointer instead).
type opaErrorItem struct {
	Code    engine.Code `json:"code"`
	Message string      `json:"message"`
}

func opaDocument(e *engine.Error, decisionID string) opaError {
	doc := opaError{Code: e.Code, Message: e.Message, DecisionID: decisionID, Error: e.Document().Error}
	for _, v := range e.Violations {
		doc.Errors = append(doc.Errors, opaErrorItem{Code: e.Code, Message: decisionlog.Violation(v).String()})
	}
	if len(doc.Errors) == 0 {
		doc.Errors = []opaErrorItem{{Code: e.Code, Message: e.Message}}
	}
	return doc
}

// isDataAPI reports whether r came on OPA's Data API path.
func isDataAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/v1/data/") }

// writeError answers q with e and its decision id.
func (s *server) writeError(q *query, decisionID string, e *engine.Error) {
	q.w.Header().Set(DecisionIDHeader, decisionID)
	writeError(q.w, e, q.wrapped, decisionID)
}

// writeJSON answers 200 with v as a JSON document.
func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, &engine.Error{Code: engine.CodePolicyError, Message: "encoding the response failed", Err: err}, false, "")
		return
	}
	writeBody(w, http.StatusOK, body)
}

// writeBody writes a complete JSON answer in one call, so a response is
// either whole or not started.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
