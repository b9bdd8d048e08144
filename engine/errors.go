package engine

import (
	"errors"
	"fmt"

	"github.com/arbiter-dev/arbiter/engine/input"
)

// Code is a stable, client-visible error code. Codes are API: never rename one.
type Code string

// The contract's error codes. The server maps each to one HTTP status.
const (
	CodeMalformedJSON        Code = "malformed_json"
	CodeInputSchemaInvalid   Code = "input_schema_invalid"
	CodeUnknownDecision      Code = "unknown_decision"
	CodeBodyTooLarge         Code = "body_too_large"
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	CodeUnauthorized         Code = "unauthorized"
	CodeNotReady             Code = "not_ready"
	CodePolicyError          Code = "policy_error"
	CodePolicyTimeout        Code = "policy_timeout"
)

// Violation is one failing location of an input, as a JSON pointer relative
// to the input document ("" is the document itself).
type Violation = input.Violation

// MaxViolations bounds the violations reported for one input (then one
// last entry counts the rest).
const MaxViolations = input.MaxViolations

// Error is the one error type of Arbiter. Message and Violations are safe to
// show to clients; Err carries internal detail that is only logged.
//
// An Error never carries a decision: every caller must treat it as a refusal.
type Error struct {
	Code       Code
	Message    string
	Violations []Violation
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// AsError returns err as an *Error, wrapping anything unclassified as a
// policy_error whose message does not leak internals.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodePolicyError, Message: "internal error while deciding", Err: err}
}

// Document is the wire form of an error, identical on HTTP and in the CLI.
type Document struct {
	Error DocumentBody `json:"error"`
}

// DocumentBody is the inner object of Document.
type DocumentBody struct {
	Code       Code        `json:"code"`
	Message    string      `json:"message"`
	Violations []Violation `json:"violations,omitempty"`
}

// Document returns the client-safe wire form of e.
func (e *Error) Document() Document {
	return Document{Error: DocumentBody{Code: e.Code, Message: e.Message, Violations: e.Violations}}
}
