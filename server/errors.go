package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/arbiter-dev/arbiter/engine"
)

// Route-level codes. They are not decision errors, so the engine does not
// know them; like every code they are API and never renamed.
const (
	CodeNotFound         engine.Code = "not_found"
	CodeMethodNotAllowed engine.Code = "method_not_allowed"
)

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
// (WWW-Authenticate, Allow) are set by the caller before.
func writeError(w http.ResponseWriter, e *engine.Error) {
	body, err := json.Marshal(e.Document())
	if err != nil { // cannot happen for strings; keep the answer well-formed anyway
		body = []byte(`{"error":{"code":"policy_error","message":"encoding the error failed"}}`)
	}
	writeBody(w, statusFor(e.Code), body)
}

// writeJSON answers v as a JSON document.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, &engine.Error{Code: engine.CodePolicyError, Message: "encoding the response failed", Err: err})
		return
	}
	writeBody(w, status, body)
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
