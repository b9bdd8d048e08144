package ireval

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// The differential harness: a query is decided by topdown (the engine's
// configuration: strict builtin errors) and by a Program compiled from the
// plan OPA's planner makes of the same query, and the outcomes compared.
//
// The plan comes from rego's own target-plugin hook: rego plans the
// compiled query exactly as it would for a Wasm or plugin target, and hands
// the ir.Policy to irTarget, which compiles it with Compile. Its Eval
// stores the raw result set for the comparison.

const targetName = "arbiter-ir-test"

type irTarget struct{}

func (irTarget) IsTarget(t string) bool { return t == targetName }

func (irTarget) PrepareForEval(_ context.Context, policy *ir.Policy, _ ...rego.PrepareOption) (rego.TargetPluginEval, error) {
	h := current
	prog, err := Compile(policy, "eval", h.data)
	if err != nil {
		return nil, err
	}
	h.prog = prog
	return irEval{h}, nil
}

type irEval struct{ h *harnessCase }

// Eval runs the program on the evaluation's input (the third argument is
// the runtime document, not the input).
func (e irEval) Eval(ctx context.Context, ectx *rego.EvalContext, _ ast.Value) (ast.Value, error) {
	input := ectx.ParsedInput()
	if input == nil && ectx.RawInput() != nil {
		v, err := ast.InterfaceToValue(*ectx.RawInput())
		if err != nil {
			return nil, err
		}
		input = v
	}
	rs, err := e.h.prog.EvalResultSet(ctx, input, EvalOptions{})
	e.h.irRS, e.h.irErr = rs, err
	return ast.NewSet(), nil
}

// harnessCase is the case being run (one at a time: the plugin is global).
type harnessCase struct {
	data  ast.Value
	prog  *Program
	irRS  []ast.Value
	irErr error
}

var (
	harnessMu sync.Mutex
	current   *harnessCase
	register  sync.Once
)

// outcome is one evaluator's answer: a result set, undefined (empty), or
// an error.
type outcome struct {
	rs  ast.Set // of binding objects
	n   int
	err error
}

func (o outcome) String() string {
	if o.err != nil {
		return "error: " + o.err.Error()
	}
	if o.n == 0 {
		return "undefined"
	}
	return o.rs.String()
}

// diffCase is one query over modules, data and input.
type diffCase struct {
	name    string
	modules map[string]string
	query   string
	data    map[string]any
	input   ast.Value // nil: no input
}

// verdict of one differential run.
type verdict int

const (
	agree    verdict = iota // same result set, both undefined, or both errors
	deferred                // compiled errored or was undefined, topdown answered: the engine re-decides on topdown
	unsupportedPlan
	disagree
)

type runResult struct {
	verdict  verdict
	topdown  outcome
	compiled outcome
	why      string
}

// runDiff decides c both ways.
func runDiff(ctx context.Context, c diffCase) runResult {
	register.Do(func() { rego.RegisterPlugin(targetName, irTarget{}) })
	harnessMu.Lock()
	defer harnessMu.Unlock()

	data := c.data
	if data == nil {
		data = map[string]any{}
	}
	dv, err := ast.InterfaceToValue(data)
	if err != nil {
		return runResult{verdict: unsupportedPlan, why: err.Error()}
	}
	h := &harnessCase{data: dv}
	current = h

	opts := func(extra ...func(*rego.Rego)) []func(*rego.Rego) {
		o := []func(*rego.Rego){
			rego.Query(c.query),
			rego.Store(inmem.NewFromObjectWithOpts(data, inmem.OptRoundTripOnWrite(false))),
			rego.StrictBuiltinErrors(true),
			rego.SetRegoVersion(ast.RegoV1),
		}
		names := make([]string, 0, len(c.modules))
		for n := range c.modules {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			o = append(o, rego.Module(n, c.modules[n]))
		}
		return append(o, extra...)
	}
	evalOpts := []rego.EvalOption{rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil })}
	if c.input != nil {
		evalOpts = append(evalOpts, rego.EvalParsedInput(c.input))
	}

	var td outcome
	pq, err := rego.New(opts()...).PrepareForEval(ctx)
	if err != nil {
		td.err = err
	} else {
		rs, err := pq.Eval(ctx, evalOpts...)
		td = fromResultSet(rs, err)
	}

	pqIR, err := rego.New(opts(rego.Target(targetName))...).PrepareForEval(ctx)
	if err != nil {
		var u *Unsupported
		if errors.As(err, &u) {
			return runResult{verdict: unsupportedPlan, topdown: td, why: u.Reason}
		}
		// The query does not compile (or plan): both sides must refuse it.
		if td.err != nil {
			return runResult{verdict: agree, topdown: td, compiled: outcome{err: err}}
		}
		return runResult{verdict: unsupportedPlan, topdown: td, why: "planning: " + err.Error()}
	}
	if _, err := pqIR.Eval(ctx, evalOpts...); err != nil {
		h.irErr = err
	}
	var ir outcome
	if h.irErr != nil {
		ir.err = h.irErr
	} else {
		ir.rs = ast.NewSet()
		for _, r := range h.irRS {
			ir.rs.Add(ast.NewTerm(r))
		}
		ir.n = len(h.irRS)
	}
	return compare(td, ir)
}

func fromResultSet(rs rego.ResultSet, err error) outcome {
	if err != nil {
		return outcome{err: err}
	}
	o := outcome{rs: ast.NewSet(), n: len(rs)}
	for _, r := range rs {
		obj := ast.NewObject()
		for k, v := range r.Bindings {
			t, ok := v.(*ast.Term)
			if !ok {
				x, err := ast.InterfaceToValue(v)
				if err != nil {
					return outcome{err: err}
				}
				t = ast.NewTerm(x)
			}
			obj.Insert(ast.StringTerm(k), t)
		}
		o.rs.Add(ast.NewTerm(obj))
	}
	return o
}

// compare decides the verdict. The compiled evaluator may only answer
// when topdown answers the same: a defined compiled result that topdown
// does not give, or gives otherwise, is a disagreement. A compiled error
// or undefined result where topdown answers is a deferral (the engine then
// asks topdown); deadline errors are never expected here.
func compare(td, ir outcome) runResult {
	res := runResult{topdown: td, compiled: ir}
	switch {
	case ir.err != nil && IsCancelled(ir.err):
		res.verdict, res.why = disagree, "compiled evaluation cancelled"
	case ir.err != nil && td.err != nil:
		res.verdict = agree
	case ir.err != nil:
		res.verdict, res.why = deferred, "compiled error: "+ir.err.Error()
	case ir.n == 0 && td.err == nil && td.n == 0:
		res.verdict = agree
	case ir.n == 0:
		res.verdict, res.why = deferred, "compiled undefined"
	case td.err != nil:
		res.verdict, res.why = disagree, "compiled answered where topdown failed"
	case td.n != ir.n || td.rs.Compare(ir.rs) != 0 || td.rs.String() != ir.rs.String():
		res.verdict, res.why = disagree, "different results"
	default:
		res.verdict = agree
	}
	return res
}

func (r runResult) describe() string {
	return fmt.Sprintf("%s\n  topdown:  %s\n  compiled: %s", r.why, r.topdown, r.compiled)
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }
