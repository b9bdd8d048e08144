package server

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

// TestStatusTable pins the contract's code -> status table.
func TestStatusTable(t *testing.T) {
	tests := []struct {
		code   engine.Code
		status int
	}{
		{engine.CodeMalformedJSON, 400},
		{engine.CodeInputSchemaInvalid, 400},
		{engine.CodeUnknownDecision, 404},
		{engine.CodeBodyTooLarge, 413},
		{engine.CodeUnsupportedMediaType, 415},
		{engine.CodeUnauthorized, 401},
		{engine.CodeNotReady, 503},
		{engine.CodePolicyError, 500},
		{engine.CodePolicyTimeout, 500},
		{CodeNotFound, 404},
		{CodeMethodNotAllowed, 405},
		{"some_future_code", 500},
	}
	for _, tc := range tests {
		t.Run(string(tc.code), func(t *testing.T) {
			w := httptest.NewRecorder()
			writeError(w, &engine.Error{Code: tc.code, Message: "m", Violations: []engine.Violation{{Path: "/a", Message: "v"}}}, false, "")
			if w.Code != tc.status {
				t.Errorf("status %d, want %d", w.Code, tc.status)
			}
			want := `{"error":{"code":"` + string(tc.code) + `","message":"m","violations":[{"path":"/a","message":"v"}]}}`
			if w.Body.String() != want || w.Header().Get("Content-Type") != "application/json" {
				t.Errorf("body %s (%s), want %s", w.Body, w.Header().Get("Content-Type"), want)
			}
		})
	}
}

func TestErrorWithoutViolations(t *testing.T) {
	w := httptest.NewRecorder()
	writeError(w, &engine.Error{Code: engine.CodePolicyError, Message: "m", Err: io.ErrUnexpectedEOF}, false, "")
	if got := w.Body.String(); got != `{"error":{"code":"policy_error","message":"m"}}` {
		t.Errorf("%s", got)
	}
}
