// Package shadow runs a candidate policy revision beside the live one on
// real requests without letting it answer, classifies what it would have
// changed, and gates its promotion on that impact.
//
// The same two functions judge a decision live and offline: FromRecord
// turns a decision-log record into the request to decide again, and Judge
// decides it with the candidate and classifies the change. The server
// hands Shadow the record it logs for a decision, after the answer is
// written; `arbiter replay` hands Judge the records it reads. So the live
// impact report and the offline one classify the same traffic the same way.
package shadow

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// Class is how a candidate's answer to one request differs from the live
// revision's.
type Class string

// The classes, most dangerous first: this is the order of every report.
const (
	// RefuseToAllow: the live revision refused (or failed, which is a
	// refusal) and the candidate allows. The change that corrupts live
	// sessions; forbidden by default.
	RefuseToAllow Class = "refuse_to_allow"
	// CandidateError: the live revision answered and the candidate failed
	// (policy_error, policy_timeout, or an input its schema rejects).
	// Forbidden by default.
	CandidateError Class = "candidate_error"
	// AllowToRefuse: the live revision allowed and the candidate refuses.
	AllowToRefuse Class = "allow_to_refuse"
	// ReasonsChanged: both refuse or both allow (or the decision does not
	// say what allows), and the reasons or the outcome differ.
	ReasonsChanged Class = "reasons_changed"
	// ErrorChanged: the same allowance, outcome and reasons, and the rest
	// of the answer differs: another member of the result (the error
	// string a refusal carries), or the error code when both revisions
	// failed with an error.
	ErrorChanged Class = "error_changed"
	// Same: the same result, or the same error code.
	Same Class = "same"
)

// Classes lists every class in report order, most dangerous first.
var Classes = []Class{RefuseToAllow, CandidateError, AllowToRefuse, ReasonsChanged, ErrorChanged, Same}

// DefaultForbidden are the classes that refuse a promotion unless the
// operator names others.
var DefaultForbidden = []Class{RefuseToAllow, CandidateError}

// ParseClass returns the class named s.
func ParseClass(s string) (Class, bool) {
	if i := Class(s).index(); i >= 0 {
		return Classes[i], true
	}
	return "", false
}

func (c Class) index() int { return slices.Index(Classes, c) }

// Outcome is what one revision made of one request: a result, or an error
// (its contract code and client-safe message).
type Outcome struct {
	Revision string                   `json:"policy_revision,omitempty"`
	Result   json.RawMessage          `json:"result,omitempty"`
	Error    *decisionlog.RecordError `json:"error,omitempty"`
}

func (o Outcome) failed() bool { return o.Error != nil }

// OutcomeOf is what a revision made of a request, from what Decide returned.
func OutcomeOf(revision string, d *engine.Decision, err error) Outcome {
	if err != nil {
		e := engine.AsError(err)
		return Outcome{Revision: revision, Error: &decisionlog.RecordError{Code: string(e.Code), Message: e.Message}}
	}
	return Outcome{Revision: revision, Result: d.Result}
}

// Request is one logged decision request, ready to be decided again.
type Request struct {
	DecisionID string
	Decision   string
	Body       []byte
	Options    engine.Options
	Live       Outcome
}

// Judgement is a request decided by the candidate, and its class.
type Judgement struct {
	DecisionID string  `json:"decision_id"`
	Decision   string  `json:"decision"`
	Class      Class   `json:"class"`
	Live       Outcome `json:"live"`
	Candidate  Outcome `json:"candidate"`
}

// Judge decides req with the candidate and classifies the change. It is
// the one judgement of both live shadow evaluation and replay.
func Judge(ctx context.Context, candidate *engine.Snapshot, req Request) Judgement {
	d, err := candidate.Decide(ctx, req.Decision, req.Body, req.Options)
	cand := OutcomeOf(candidate.Revision, d, err)
	v, _ := candidate.Verdict(req.Decision) // none: nothing allows, as for an unknown decision
	return Judgement{DecisionID: req.DecisionID, Decision: req.Decision, Class: Classify(v, req.Live, cand), Live: req.Live, Candidate: cand}
}

// Classify compares the live outcome of a request with the candidate's.
// Allowance is read from both results with the candidate's result schema
// (the revision being judged, and the only one replay has): an outcome
// value listed in its x-arbiter-allow allows; every other value, a missing
// outcome and every error refuse.
func Classify(v engine.Verdict, live, cand Outcome) Class {
	switch {
	case SameAnswer(live, cand):
		return Same
	case live.failed() && cand.failed():
		return ErrorChanged
	case cand.failed():
		return CandidateError
	case live.failed():
		if allowed, _ := v.Allows(cand.Result); allowed {
			return RefuseToAllow
		}
		return ErrorChanged
	}
	liveAllows, _ := v.Allows(live.Result)
	candAllows, _ := v.Allows(cand.Result)
	switch {
	case !liveAllows && candAllows:
		return RefuseToAllow
	case liveAllows && !candAllows:
		return AllowToRefuse
	case !sameMember(live.Result, cand.Result, "reasons") || !sameMember(live.Result, cand.Result, v.OutcomeKey):
		return ReasonsChanged
	}
	return ErrorChanged
}

// SameAnswer is the one equality of two outcomes of a request, wherever
// Arbiter decides twice and compares (shadow, replay, the diff's
// confirmation): the same result value (engine.SameJSON: numbers by value,
// members in any order), or errors of the same code.
func SameAnswer(a, b Outcome) bool {
	if a.failed() || b.failed() {
		return a.failed() && b.failed() && a.Error.Code == b.Error.Code
	}
	return engine.SameJSON(a.Result, b.Result)
}

// sameMember reports whether two results hold the same value (or both
// none) in member key. "reasons" is the engine's convention for the list
// of reason codes (Decision.Reasons); the outcome member is the one the
// result schema names.
func sameMember(a, b json.RawMessage, key string) bool {
	x, y := member(a, key), member(b, key)
	if x == nil || y == nil {
		return x == nil && y == nil
	}
	return engine.SameJSON(x, y)
}

func member(result json.RawMessage, key string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) != nil {
		return nil
	}
	if m := bytes.TrimSpace(obj[key]); len(m) > 0 {
		return m
	}
	return nil
}
