// Package testsignal lets a test learn that a policy evaluation reached a
// given point, instead of sleeping in the hope that it did: importing it
// registers the Rego builtin arbiter_test.reached(name), which closes the
// channel On returned for name and is true. Only tests import it, so only
// test binaries know the builtin.
package testsignal

import (
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/types"
)

// Builtin is the builtin's name, to write into a test's policy.
const Builtin = "arbiter_test.reached"

var signals sync.Map // name -> chan struct{}

func init() {
	rego.RegisterBuiltin1(&rego.Function{Name: Builtin, Decl: types.NewFunction(types.Args(types.S), types.B)},
		func(_ rego.BuiltinContext, name *ast.Term) (*ast.Term, error) {
			if s, ok := name.Value.(ast.String); ok {
				if ch, ok := signals.LoadAndDelete(string(s)); ok {
					close(ch.(chan struct{}))
				}
			}
			return ast.BooleanTerm(true), nil
		})
}

// On returns a channel closed when a policy calls Builtin(name).
func On(t testing.TB, name string) <-chan struct{} {
	ch := make(chan struct{})
	signals.Store(name, ch)
	t.Cleanup(func() { signals.Delete(name) })
	return ch
}

// Loop is Rego that calls Builtin(name) when the input's tenant is name,
// then runs through ten billion pairs of two small ranges, in constant
// memory: an evaluation that only its deadline or its context ends. It is
// a rule to add to a policy (it adds reason rank 3, "runaway").
func Loop(name string) string {
	return "failures contains [3, \"runaway\"] if {\n\tinput.tenant == \"" + name + "\"\n\t" + Builtin + "(input.tenant)\n" +
		"\tsome i in numbers.range(1, 100000)\n\tsome j in numbers.range(1, 100000)\n\ti == j + 100000\n}\n\n"
}
