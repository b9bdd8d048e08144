package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Options change what Decide returns, never what it decides.
type Options struct {
	// Explain adds each reason rule's outcome, title and description.
	Explain bool
	// Wrapped means the body is an OPA Data API request, {"input": ...};
	// violations stay relative to the input document.
	Wrapped bool
}

// Decision is one decision made: the envelope of the contract plus what the
// decision log and metrics need.
type Decision struct {
	ID          string          `json:"decision_id"`
	Name        string          `json:"decision"`
	Revision    string          `json:"policy_revision"`
	Result      json.RawMessage `json:"result"`
	Explanation []RuleOutcome   `json:"explanation,omitempty"`

	// Input is the input document exactly as received.
	Input json.RawMessage `json:"-"`
	// Reasons are the result's reasons, when it has a "reasons" array.
	Reasons []string `json:"-"`
	// Outcome is the result member named by the result schema's
	// "x-arbiter-outcome" keyword (default "outcome"), for metrics.
	Outcome string `json:"-"`
}

// RuleOutcome is one reason rule in an explanation.
type RuleOutcome struct {
	RuleInfo
	// Fired is true when the rule's reason is in the result's reasons.
	Fired bool `json:"fired"`
}

// Decide decides one input with this Snapshot. A refusal is a Decision; an
// error (always an *Error) means that no trustworthy decision exists and the
// caller must refuse.
func (s *Snapshot) Decide(ctx context.Context, name string, body []byte, opts Options) (*Decision, error) {
	def, ok := s.decisions[name]
	if !ok {
		return nil, &Error{Code: CodeUnknownDecision, Message: fmt.Sprintf("no decision named %q", name)}
	}
	input, raw, err := def.parseInput(body, opts.Wrapped)
	if err != nil {
		return nil, err
	}
	result, err := s.evaluate(ctx, def, input, raw) // compiled or topdown: engine/compiled.go
	if err != nil {
		return nil, err
	}
	out, err := def.checkResult(result)
	if err != nil {
		return nil, err
	}
	d := &Decision{ID: NewDecisionID(), Name: name, Revision: s.Revision, Result: out, Input: raw}
	d.Reasons, d.Outcome = summarize(result, def.outcomeKey)
	if opts.Explain {
		d.Explanation = explain(def.rules, d.Reasons)
	}
	return d, nil
}

// parseInput turns a request body into the policy's input: strictly
// decoded, validated against the input schema, as an ast.Value. The fast
// path does all of it in one pass; the general path (decode to Go values,
// validate, convert) runs when the schema is beyond the fast validator, and
// to report the violations of an input the fast path rejected.
func (def *decisionDef) parseInput(body []byte, wrapped bool) (ast.Value, json.RawMessage, error) {
	if def.fastInput != nil {
		v, raw, valid, err := parseValidate(body, def.fastInput, wrapped)
		if err != nil {
			return nil, nil, &Error{Code: CodeMalformedJSON, Message: err.Error()}
		}
		if valid {
			return v, raw, nil
		}
		if viol := reportViolations(body, def.fastInput, wrapped); len(viol) > 0 {
			return nil, nil, &Error{Code: CodeInputSchemaInvalid, Message: "input does not match the schema of decision " + def.name, Violations: viol}
		}
		// No violation found the second time: only an input that is not an
		// object (or a wrapper without one) gets here; the general path
		// words that error.
	}
	doc, raw, err := decodeInput(body, wrapped)
	if err != nil {
		return nil, nil, err
	}
	if err := def.inputSchema.Validate(doc); err != nil {
		return nil, nil, &Error{Code: CodeInputSchemaInvalid, Message: "input does not match the schema of decision " + def.name, Violations: capViolations(violations(err))}
	}
	if def.fastInput != nil {
		// The validators disagree: a bug, and never a reason to decide.
		return nil, nil, &Error{Code: CodePolicyError, Message: "input validators disagree on this input", Err: fmt.Errorf("fast validator rejected an input the schema accepts")}
	}
	input, err := ast.InterfaceToValue(doc)
	if err != nil {
		return nil, nil, &Error{Code: CodePolicyError, Message: "converting the input failed", Err: err}
	}
	return input, raw, nil
}

func decodeInput(body []byte, wrapped bool) (any, json.RawMessage, error) {
	if !wrapped {
		doc, err := decodeStrict(body)
		if err != nil {
			return nil, nil, &Error{Code: CodeMalformedJSON, Message: err.Error()}
		}
		if _, ok := doc.(map[string]any); !ok {
			return nil, nil, notAnObject()
		}
		return doc, body, nil
	}
	doc, spans, err := decodeSpans(body)
	if err != nil {
		return nil, nil, &Error{Code: CodeMalformedJSON, Message: err.Error()}
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, &Error{Code: CodeInputSchemaInvalid, Message: "the request body must be a JSON object with an input member", Violations: []Violation{{Path: "", Message: "expected an object with an input member"}}}
	}
	in, ok := obj["input"]
	if !ok {
		return nil, nil, &Error{Code: CodeInputSchemaInvalid, Message: "the request body has no input member", Violations: []Violation{{Path: "", Message: "missing input"}}}
	}
	if _, ok := in.(map[string]any); !ok {
		return nil, nil, notAnObject()
	}
	return in, spans["input"], nil
}

func notAnObject() error {
	return &Error{Code: CodeInputSchemaInvalid, Message: "the input must be a JSON object", Violations: []Violation{{Path: "", Message: "expected an object"}}}
}

func (s *Snapshot) eval(ctx context.Context, def *decisionDef, input ast.Value) (ast.Value, error) {
	// The deadline and the caller going away both cancel the evaluation
	// through callbacks: rego's own ctx watch costs a goroutine per call.
	c := topdown.NewCancel()
	timer := time.AfterFunc(s.timeout, c.Cancel)
	stopWatch := context.AfterFunc(ctx, c.Cancel)
	rs, err := def.query.Eval(ctx, rego.EvalParsedInput(input), keepTerm, rego.EvalExternalCancel(c))
	timer.Stop()
	stopWatch()
	if err != nil {
		var te *topdown.Error
		if errors.As(err, &te) && te.Code == topdown.CancelErr {
			if ctx.Err() != nil {
				return nil, &Error{Code: CodePolicyTimeout, Message: "the request was cancelled during policy evaluation", Err: err}
			}
			return nil, &Error{Code: CodePolicyTimeout, Message: fmt.Sprintf("policy evaluation exceeded %s", s.timeout), Err: err}
		}
		return nil, &Error{Code: CodePolicyError, Message: "policy evaluation failed", Err: err}
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, &Error{Code: CodePolicyError, Message: "the policy left decision " + def.name + " undefined for this input"}
	}
	if len(rs) > 1 {
		return nil, &Error{Code: CodePolicyError, Message: "the policy produced more than one result"}
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return nil, &Error{Code: CodePolicyError, Message: "the policy produced an unexpected result", Err: fmt.Errorf("result is %T", rs[0].Expressions[0].Value)}
	}
	return t.Value, nil
}

// checkResult validates a result against the result schema and encodes it.
// A result that breaks its schema is a policy_error: the caller refuses.
func (def *decisionDef) checkResult(result ast.Value) (json.RawMessage, error) {
	if def.treeResult != nil && validValue(def.treeResult, result) {
		if out, ok := appendJSON(nil, result); ok {
			return out, nil
		}
	}
	// The general path: also the one that words the violations.
	doc, err := ast.JSON(result)
	if err != nil {
		return nil, &Error{Code: CodePolicyError, Message: "the policy returned a value that is not JSON", Err: err}
	}
	if err := def.result.Validate(doc); err != nil {
		return nil, &Error{Code: CodePolicyError, Message: "the policy returned a result that does not match the result schema of decision " + def.name, Violations: capViolations(violations(err)), Err: err}
	}
	if def.treeResult != nil {
		// The validators disagree: a bug, and never a reason to answer.
		return nil, &Error{Code: CodePolicyError, Message: "result validators disagree on this result", Err: fmt.Errorf("tree validator rejected a result the schema accepts: %v", result)}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, &Error{Code: CodePolicyError, Message: "encoding the result failed", Err: err}
	}
	return out, nil
}

// summarize reads the conventional "reasons" member of a result, and the
// member its result schema names as the outcome, for logs and metrics. It is
// descriptive only: the result itself is what callers act on.
func summarize(result ast.Value, outcomeKey string) ([]string, string) {
	obj, ok := result.(ast.Object)
	if !ok {
		return nil, ""
	}
	var reasons []string
	if t := obj.Get(ast.InternedTerm("reasons")); t != nil {
		if arr, ok := t.Value.(*ast.Array); ok {
			for i := 0; i < arr.Len(); i++ {
				if s, ok := arr.Elem(i).Value.(ast.String); ok {
					reasons = append(reasons, string(s))
				}
			}
		}
	}
	if t := obj.Get(ast.StringTerm(outcomeKey)); t != nil {
		switch o := t.Value.(type) {
		case ast.String:
			return reasons, string(o)
		case ast.Boolean:
			return reasons, strconv.FormatBool(bool(o))
		}
	}
	return reasons, ""
}

func explain(rules []RuleInfo, reasons []string) []RuleOutcome {
	fired := map[string]bool{}
	for _, r := range reasons {
		fired[r] = true
	}
	out := make([]RuleOutcome, len(rules))
	for i, r := range rules {
		out[i] = RuleOutcome{RuleInfo: r, Fired: fired[r.Reason]}
	}
	return out
}

// NewDecisionID returns a random 128-bit identifier in UUID form.
func NewDecisionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// capViolations keeps the first MaxViolations and counts the rest.
func capViolations(v []Violation) []Violation {
	if len(v) <= MaxViolations {
		return v
	}
	n := len(v) - MaxViolations
	return append(v[:MaxViolations:MaxViolations], Violation{Path: "", Message: fmt.Sprintf("%d more violations not listed", n)})
}
