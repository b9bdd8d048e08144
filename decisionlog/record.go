// Package decisionlog records every decision as one JSON line, off the request
// path, so that it can be audited and decided again by `arbiter replay`.
package decisionlog

import (
	"encoding/json"
	"time"
)

// Record is one decision as logged: everything needed to decide it again.
type Record struct {
	DecisionID string          `json:"decision_id"`
	Time       time.Time       `json:"time"`
	Decision   string          `json:"decision"`
	Revision   string          `json:"policy_revision,omitempty"`
	Path       string          `json:"path"`
	Input      json.RawMessage `json:"input,omitempty"`
	BodyBase64 string          `json:"body_base64,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *RecordError    `json:"error,omitempty"`
	DurationNS int64           `json:"duration_ns"`
	Caller     string          `json:"caller,omitempty"`
}

// RecordError is the error a decision ended with: its contract code and the
// client-safe message.
type RecordError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
