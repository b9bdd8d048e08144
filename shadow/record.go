package shadow

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// redecidable are the errors the engine itself returns for an input. The
// others (body_too_large, unauthorized, not_ready, overloaded, ...) come
// from the server before any policy ran: deciding their input again says
// nothing about a policy change.
var redecidable = map[engine.Code]bool{
	engine.CodeMalformedJSON:      true,
	engine.CodeInputSchemaInvalid: true,
	engine.CodeUnknownDecision:    true,
	engine.CodePolicyError:        true,
	engine.CodePolicyTimeout:      true,
}

// Redecidable reports, without reading the input, whether rec is a record
// that FromRecord may turn into a request: a result, or an error the
// engine returned for its input. It is the cheap test the server makes
// before it samples a decision.
func Redecidable(rec *decisionlog.Record) bool {
	switch {
	case rec.Decision == "":
		return false
	case len(rec.Result) > 0:
		return len(rec.Input) > 0
	case rec.Error != nil:
		return redecidable[engine.Code(rec.Error.Code)] && (len(rec.Input) > 0 || rec.BodyBase64 != "")
	}
	return false
}

// FromRecord turns a decision-log record into the request to decide again,
// or says why it cannot be: it names no decision, its error came before
// any policy ran, or its input was not logged as received.
func FromRecord(rec decisionlog.Record) (Request, string) {
	req := Request{DecisionID: rec.DecisionID, Decision: rec.Decision, Live: Outcome{Revision: rec.Revision}}
	if rec.Decision == "" {
		return req, "the record names no decision"
	}
	switch {
	case len(rec.Result) > 0:
		req.Live.Result = rec.Result
	case rec.Error != nil:
		if !redecidable[engine.Code(rec.Error.Code)] {
			return req, fmt.Sprintf("error %s was returned before any policy ran", decisionlog.Shown(rec.Error.Code))
		}
		e := *rec.Error
		req.Live.Error = &e
	default:
		return req, "the record has neither a result nor an error"
	}
	// On the OPA Data API path the request body is the {"input": ...}
	// wrapper. A decision logs the input it unwrapped; a request that failed
	// logs its body as received, in input when it is JSON and in
	// body_base64 otherwise.
	req.Options.DataAPIBody = strings.HasPrefix(rec.Path, "/v1/data/") && req.Live.failed()
	// Whether the input was masked is read from the record's masked and
	// erased lists, never from the content: a caller can put any string in
	// its own input.
	if ok, why := rec.Complete(); !ok {
		return req, "its input was " + why
	}
	switch {
	case len(rec.Input) > 0:
		req.Body = rec.Input
	case rec.BodyBase64 != "":
		b, err := base64.StdEncoding.DecodeString(rec.BodyBase64)
		if err != nil {
			return req, "body_base64 is not base64: " + err.Error()
		}
		req.Body = b
	default:
		return req, "no input was logged"
	}
	return req, ""
}
