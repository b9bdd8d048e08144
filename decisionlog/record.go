// Package decisionlog records every decision as one JSON line, off the request
// path, so that it can be audited and decided again by `arbiter replay`.
package decisionlog

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Record is one decision as logged: everything needed to decide it again.
//
// A request that failed holds its body only when it is small: Input when it
// is JSON, BodyBase64 otherwise. A larger body is described by its size,
// its sha256 and a bounded prefix, never copied whole (BodySize alone, with
// no digest, is a body that was not fully received).
type Record struct {
	DecisionID string          `json:"decision_id"`
	Time       time.Time       `json:"time"`
	Decision   string          `json:"decision"`
	Revision   string          `json:"policy_revision,omitempty"`
	Path       string          `json:"path"`
	Input      json.RawMessage `json:"input,omitempty"`
	BodyBase64 string          `json:"body_base64,omitempty"`
	BodySize   int64           `json:"body_size,omitempty"`
	BodySHA256 string          `json:"body_sha256,omitempty"`
	BodyPrefix string          `json:"body_prefix_base64,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *RecordError    `json:"error,omitempty"`
	DurationNS int64           `json:"duration_ns"`
	Caller     string          `json:"caller,omitempty"`
	// Masked and Erased list, as OPA's decision-log events do, the JSON
	// pointers (from the record's root: /input/...) whose values the log
	// replaced with MaskedValue or left out. A record with either is not
	// the request as received, and replay says so without looking at the
	// content, which a caller controls.
	Masked []string `json:"masked,omitempty"`
	Erased []string `json:"erased,omitempty"`
}

// Complete reports whether rec holds the whole request as received, so
// that deciding it again means something, and why not otherwise.
func (rec Record) Complete() (bool, string) {
	switch {
	case len(rec.Masked) > 0:
		return false, "masked when logged: " + strings.Join(rec.Masked, ", ")
	case len(rec.Erased) > 0:
		return false, "erased when logged: " + strings.Join(rec.Erased, ", ")
	case len(rec.Input) == 0 && rec.BodyBase64 == "" && rec.BodySize > 0:
		return false, fmt.Sprintf("its %d-byte body was not logged whole", rec.BodySize)
	}
	return true, ""
}

// RecordError is the error a decision ended with: its contract code and the
// client-safe message.
type RecordError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
