package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
)

// keepTerm makes the prepared query hand back the result as OPA built it,
// instead of converting it to Go maps that would then be walked twice more
// (validation, encoding).
var keepTerm = rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil })

// Options change what Decide returns, never what it decides.
type Options struct {
	// Explain adds each reason rule's outcome, title and description.
	Explain bool
	// DataAPIBody means the body is an OPA Data API request, {"input": ...}
	// (POST /v1/data/...), rather than the input document itself;
	// violations stay relative to the input document.
	DataAPIBody bool
	// Snapshot decides, when set: the one the caller already looked at
	// (the server loads the active Snapshot once per request). Nil means
	// the active one. Snapshot.Decide ignores it.
	Snapshot *Snapshot
	// Admit is handed the body's JSON values as the one pass over it reads
	// them (input.Options.Admit); its error is returned as it is.
	Admit func(values int) error
	// Topdown decides on topdown, the authority, whatever program the
	// decision has: a diff's confirmation, and background work (only
	// topdown calls Background's pause).
	Topdown bool
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
	// InputOneLine is true when the body held no line break (input.Input).
	InputOneLine bool `json:"-"`
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
	// Evidence lists, for a rule that fired, the input values it read
	// (engine/evidence.go).
	Evidence []Evidence `json:"evidence,omitempty"`
	// Checked lists, for a rule that did not fire (a condition that held),
	// the same: the values it read, which kept it from firing.
	Checked []Evidence `json:"checked,omitempty"`
}

// Read is what the rule read: its Evidence when it fired, else Checked.
func (r RuleOutcome) Read() []Evidence {
	if r.Fired {
		return r.Evidence
	}
	return r.Checked
}

// Decide decides one input with this Snapshot. A refusal is a Decision; an
// error (always an *Error) means that no trustworthy decision exists and the
// caller must refuse.
func (s *Snapshot) Decide(ctx context.Context, name string, body []byte, opts Options) (*Decision, error) {
	def, ok := s.decisions[name]
	if !ok {
		return nil, &Error{Code: CodeUnknownDecision, Message: fmt.Sprintf("no decision named %q", name)}
	}
	in, err := s.parseInput(ctx, def, body, opts)
	if err != nil {
		return nil, err
	}
	result, err := s.evaluate(ctx, def, in.Value, in.Raw, opts.Topdown) // compiled or topdown: engine/compiled.go
	if err != nil {
		return nil, err
	}
	out, err := def.checkResult(result)
	if err != nil {
		return nil, err
	}
	d := &Decision{ID: uuid.NewString(), Name: name, Revision: s.Revision, Result: out, Input: in.Raw, InputOneLine: in.OneLine}
	d.Reasons, d.Outcome = summarize(result, def.outcomeKey)
	if opts.Explain {
		d.Explanation = explain(def, d.Reasons, in.Value)
	}
	return d, nil
}

// parseInput turns a request body into the policy's input: strictly
// scanned, validated against the input schema (the library's compiled
// schema is the one authority) and built as an ast.Value, in one pass
// (package input). Every failure is an *Error.
func (s *Snapshot) parseInput(ctx context.Context, def *decisionDef, body []byte, opts Options) (input.Input, error) {
	proj := def.inputProjection()
	if opts.Explain {
		proj = nil // the evidence shows the values the rules read whole
	}
	in, err := input.Parse(ctx, body, def.input, input.Options{DataAPIBody: opts.DataAPIBody, Projection: proj, MaxValues: s.maxValues, Admit: opts.Admit})
	if err == nil {
		return in, nil
	}
	var (
		own   *Error // Admit's
		syn   *input.SyntaxError
		inv   *input.InvalidError
		limit *input.LimitError
		dis   *input.DisagreementError
	)
	switch {
	case errors.As(err, &own):
		return in, own
	case errors.As(err, &syn):
		return in, &Error{Code: CodeMalformedJSON, Message: syn.Error()}
	case errors.As(err, &inv):
		msg := inv.Message
		if msg == "input does not match the schema" {
			msg += " of decision " + def.name
		}
		return in, &Error{Code: CodeInputSchemaInvalid, Message: msg, Violations: inv.Violations}
	case errors.As(err, &limit):
		return in, &Error{Code: CodeBodyTooLarge, Message: limit.Error(), Err: err}
	case errors.As(err, &dis):
		// A bug, and never a reason to decide.
		return in, &Error{Code: CodePolicyError, Message: "input validation failed", Err: err}
	case ctx.Err() != nil:
		return in, &Error{Code: CodePolicyTimeout, Message: "the request's deadline passed while reading the input", Err: err}
	default:
		return in, &Error{Code: CodePolicyError, Message: "reading the input failed", Err: err}
	}
}

func (s *Snapshot) eval(ctx context.Context, def *decisionDef, input ast.Value) (ast.Value, error) {
	// The deadline and the caller going away both cancel the evaluation
	// through callbacks: rego's own ctx watch costs a goroutine per call.
	c := newCancel(ctx)                             // pauses when ctx is Background (yield.go)
	timer := afterRunning(ctx, s.timeout, c.Cancel) // a Background deadline counts running time only
	stopWatch := context.AfterFunc(ctx, c.Cancel)
	rs, err := def.query.Eval(ctx, rego.EvalParsedInput(input), keepTerm, rego.EvalExternalCancel(c))
	timer.Stop()
	stopWatch()
	if err != nil {
		var te *topdown.Error
		if errors.As(err, &te) && te.Code == topdown.CancelErr {
			return nil, s.timedOut(ctx, err)
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

// timedOut is the error of an evaluation, compiled or topdown's, that its
// deadline or the caller going away stopped.
func (s *Snapshot) timedOut(ctx context.Context, err error) *Error {
	if ctx.Err() != nil {
		return &Error{Code: CodePolicyTimeout, Message: "the request was cancelled during policy evaluation", Err: err}
	}
	return &Error{Code: CodePolicyTimeout, Message: fmt.Sprintf("policy evaluation exceeded %s", s.timeout), Err: err}
}

// checkResult validates a result against the result schema, with the
// library, and encodes it. A result that breaks its schema is a
// policy_error: the caller refuses. A result whose encoding passed before
// is not validated again (validResults).
func (def *decisionDef) checkResult(result ast.Value) (json.RawMessage, error) {
	out, err := jsonenc.AppendValue(nil, result)
	if err != nil {
		return nil, &Error{Code: CodePolicyError, Message: "the policy returned a value that is not JSON", Err: err}
	}
	if def.valid.has(out) {
		return out, nil
	}
	doc, err := ast.JSON(result)
	if err != nil {
		return nil, &Error{Code: CodePolicyError, Message: "the policy returned a value that is not JSON", Err: err}
	}
	if err := def.result.Validate(doc); err != nil {
		return nil, &Error{Code: CodePolicyError, Message: "the policy returned a result that does not match the result schema of decision " + def.name, Violations: input.Violations(err), Err: err}
	}
	def.valid.add(out)
	return out, nil
}

// validResults are the encodings of results that passed their decision's
// result schema: a decision has few distinct results (an allowance, a
// refusal and its reasons), and equal bytes are the same JSON document, the
// only thing validation reads, so the same result is not validated again
// (the check was a tenth of a typical decision's CPU). Only results that
// passed are kept, at most maxValidResults of at most maxValidResultBytes
// each, for the life of the Snapshot; any other is validated.
type validResults struct {
	mu   sync.Mutex // adders
	seen atomic.Pointer[map[string]struct{}]
}

const (
	maxValidResults     = 256
	maxValidResultBytes = 1 << 10
)

func (v *validResults) has(b []byte) bool {
	m := v.seen.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[string(b)]
	return ok
}

// add keeps b; readers never lock: each addition publishes a new map.
func (v *validResults) add(b []byte) {
	if len(b) > maxValidResultBytes {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var old map[string]struct{}
	if p := v.seen.Load(); p != nil {
		old = *p
	}
	if len(old) >= maxValidResults {
		return
	}
	m := make(map[string]struct{}, len(old)+1)
	maps.Copy(m, old)
	m[string(b)] = struct{}{}
	v.seen.Store(&m)
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
			reasons = make([]string, 0, arr.Len()) // [] when empty, as the result says, not nil
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
