package ireval

import (
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// refusedBuiltins are builtins the evaluator leaves to topdown although
// they are deterministic: they need an evaluation context this evaluator
// does not build (print hooks, tracers).
var refusedBuiltins = map[string]string{
	"internal.print": "print needs topdown's print hook",
	"print":          "print needs topdown's print hook",
	"trace":          "trace needs topdown's tracers",
}

// resolveBuiltin binds a builtin called by a plan to OPA's own
// implementation, the one topdown calls. Builtins that are
// non-deterministic (they read the clock, randomness, the network or the
// runtime through the builtin context) are refused: a decision that uses
// one stays on topdown.
func resolveBuiltin(name string, nargs int) (*builtinImpl, error) {
	decl, ok := ast.BuiltinMap[name]
	if !ok {
		return nil, unsupported("builtin %s is not one of OPA's", name)
	}
	if why, ok := refusedBuiltins[name]; ok {
		return nil, unsupported("builtin %s: %s", name, why)
	}
	if decl.Nondeterministic {
		return nil, unsupported("builtin %s is non-deterministic", name)
	}
	if decl.Decl.Result() == nil {
		return nil, unsupported("builtin %s returns nothing", name)
	}
	f := topdown.GetBuiltin(name)
	if f == nil {
		return nil, unsupported("builtin %s has no implementation in topdown", name)
	}
	if !decl.Relation && nargs != decl.Decl.Arity() {
		return nil, unsupported("builtin %s called with %d arguments, want %d", name, nargs, decl.Decl.Arity())
	}
	return &builtinImpl{name: name, f: f, relation: decl.Relation}, nil
}
