package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/engine/ireval"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
)

// A decision runs compiled when OPA's planner plans its query and
// engine/ireval compiles the plan: Decide then evaluates the compiled
// program instead of topdown. Topdown stays the authority:
//
//   - a decision whose plan uses anything ireval does not implement runs on
//     topdown (CompiledInfo says why);
//   - a compiled evaluation that ends in an error or an undefined result is
//     decided again by topdown, whose answer (or error) is the answer: only
//     a defined compiled result is ever returned, and the differential
//     tests prove those equal to topdown's;
//   - a sample of compiled answers is decided again by topdown in the
//     background (Config.SelfCheck hands each to package shadow, which
//     runs Recheck.Run); a disagreement turns the compiled path off for
//     that decision until the next reload.

// compiledDecision is the compiled form of one decision of a Snapshot.
type compiledDecision struct {
	prog   *ireval.Program // nil: the decision runs on topdown
	reason string          // why prog is nil
	// proj is prog's input projection; nil: the whole input.
	proj *input.Projection
	// off is set by the self-check on a disagreement, with its reason.
	off atomic.Pointer[string]
	// tamper, set by tests only, replaces the compiled result: a stand-in
	// for a compiler bug, to prove that the self-check catches one.
	tamper func(ast.Value) ast.Value
}

// CompiledInfo says whether a decision runs compiled, and why not.
type CompiledInfo struct {
	Decision string `json:"decision"`
	Compiled bool   `json:"compiled"`
	// Reason is why the decision runs on topdown: what the compiler does
	// not support, or the self-check disagreement that turned it off.
	Reason string `json:"reason,omitempty"`
}

// Compiled lists, per decision, whether it runs compiled.
func (s *Snapshot) Compiled() []CompiledInfo {
	out := make([]CompiledInfo, 0, len(s.names))
	for _, n := range s.names {
		out = append(out, s.decisions[n].compiled.info(n))
	}
	return out
}

func (cd *compiledDecision) info(name string) CompiledInfo {
	switch {
	case cd == nil:
		return CompiledInfo{Decision: name, Reason: "not compiled"}
	case cd.prog == nil:
		return CompiledInfo{Decision: name, Reason: cd.reason}
	}
	if why := cd.off.Load(); why != nil {
		return CompiledInfo{Decision: name, Reason: *why}
	}
	return CompiledInfo{Decision: name, Compiled: true}
}

// program returns the program to run, nil when the decision runs on topdown.
func (cd *compiledDecision) program() *ireval.Program {
	if cd == nil || cd.prog == nil || cd.off.Load() != nil {
		return nil
	}
	return cd.prog
}

// inputProjection is what the input path must build of an input of def:
// nil (the whole input) unless the decision runs compiled. Topdown, which
// decides whatever the compiled program does not, answers the same on the
// projected input (TestProjectionAgrees*); a decision the self-check turned
// off gets whole inputs again.
func (def *decisionDef) inputProjection() *input.Projection {
	if def.compiled.program() == nil {
		return nil
	}
	return def.compiled.proj
}

// evaluate decides input with the decision's compiled program when it has
// one, and with topdown otherwise or whenever the compiled evaluation ends
// without a result. raw is the input document as received, for the
// self-check. topdown (Options.Topdown) chooses topdown whatever the program.
func (s *Snapshot) evaluate(ctx context.Context, def *decisionDef, input ast.Value, raw []byte, topdown bool) (ast.Value, error) {
	prog := def.compiled.program()
	if prog == nil || topdown {
		return s.eval(ctx, def, input)
	}
	deadline := time.Now().Add(s.timeout)
	v, err := prog.Eval(ctx, input, ireval.EvalOptions{Deadline: deadline})
	if err != nil {
		if ireval.IsCancelled(err) {
			return nil, s.timedOut(ctx, err)
		}
		// Undefined, a conflict, a builtin error: topdown decides, within
		// what is left of the deadline, and its answer or error stands.
		return s.evalWithin(ctx, def, input, deadline)
	}
	if def.compiled.tamper != nil {
		v = def.compiled.tamper(v)
	}
	if s.selfCheck != nil {
		s.selfCheck(Recheck{Snapshot: s, Decision: def.name, Input: raw, Compiled: v})
	}
	return v, nil
}

// evalWithin runs topdown with what is left of deadline.
func (s *Snapshot) evalWithin(ctx context.Context, def *decisionDef, input ast.Value, deadline time.Time) (ast.Value, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	v, err := s.eval(dctx, def, input)
	if e := AsError(err); e != nil && e.Code == CodePolicyTimeout && ctx.Err() == nil {
		e.Message = fmt.Sprintf("policy evaluation exceeded %s", s.timeout)
	}
	return v, err
}

// Recheck is one answer of a compiled program, handed to Config.SelfCheck on
// the request path, to be decided again by topdown off it: package shadow
// samples them (its self-check lane) and runs them on its workers.
type Recheck struct {
	Snapshot *Snapshot
	Decision string
	// Input is the input document as received: the request's buffer, which
	// goes back to the server's pool with the answer (copy it to keep it).
	Input []byte
	// Compiled is the compiled program's answer (a test sets a wrong one as
	// a compiler bug would).
	Compiled ast.Value
}

// Disagreement is one input on which the compiled program and topdown
// answered differently.
type Disagreement struct {
	Decision string          `json:"decision"`
	Revision string          `json:"policy_revision"`
	Input    json.RawMessage `json:"input"`
	Compiled string          `json:"compiled"`
	Topdown  string          `json:"topdown"`
}

// Run decides c's input again with topdown, on the whole input parsed by
// the general decoder (independent of the fast parser and of any
// projection), and compares the answers with exact equality. It returns
// the Disagreement, which turns the compiled path off for the decision
// until the next reload, or nil; concluded is false when topdown ran out
// of time, so that nothing was compared. ctx may be engine.Background's.
func (c Recheck) Run(ctx context.Context) (d *Disagreement, concluded bool) {
	def := c.Snapshot.decisions[c.Decision]
	doc, err := input.Decode(c.Input)
	if err != nil {
		return c.disagree(def, fmt.Sprintf("the input the compiled program answered does not decode: %v", err)), true
	}
	whole, err := input.Value(doc)
	if err != nil {
		return c.disagree(def, fmt.Sprintf("the input the compiled program answered does not convert: %v", err)), true
	}
	want, err := c.Snapshot.eval(ctx, def, whole)
	switch {
	case err != nil && AsError(err).Code == CodePolicyTimeout:
		return nil, false
	case err != nil:
		return c.disagree(def, "error: "+err.Error()), true
	case sameValue(want, c.Compiled):
		return nil, true
	}
	return c.disagree(def, valueString(want)), true
}

func (c Recheck) disagree(def *decisionDef, topdown string) *Disagreement {
	why := "the self-check found the compiled program disagreeing with topdown; compiled evaluation is off until the next reload"
	def.compiled.off.Store(&why)
	return &Disagreement{Decision: c.Decision, Revision: c.Snapshot.Revision, Input: c.Input, Compiled: valueString(c.Compiled), Topdown: topdown}
}

// sameValue is exact equality: equal as Rego values and spelt the same
// (1 and 1.0 are equal values that encode differently).
func sameValue(a, b ast.Value) bool {
	return ast.Compare(a, b) == 0 && valueString(a) == valueString(b)
}

func valueString(v ast.Value) string {
	if out, err := jsonenc.AppendValue(nil, v); err == nil {
		return string(out)
	}
	return v.String()
}
