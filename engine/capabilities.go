package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// refusedPrefixes name builtins that reach outside the process (network,
// runtime environment, clock, randomness) beyond what OPA marks
// non-deterministic. A decision must depend on its input and data only, so
// that replaying a logged input under the same revision gives the same answer.
var refusedPrefixes = []string{"http.", "net.", "opa.runtime", "rand.", "uuid.", "time.now_ns"}

// refusedExact are builtins that OPA marks deterministic but that Arbiter
// refuses too, found by engine/sandbox_test.go:
//   - crypto.x509.parse_and_verify_certificates(_with_options) verify
//     against the wall clock unless told otherwise: the clock is outside;
//   - strings.render_template (nested {{range}}), graph.reachable_paths
//     (exponential in the graph) and bits.lsh (allocates 2^n bits from one
//     small number) do unbounded work inside one builtin call, which never
//     checks the evaluation deadline: a 60-element template ran 48 s and
//     took 2.5 GiB past a 200 ms deadline. Everything else that loops is cut
//     off at the deadline (numbers.range and concat check it themselves).
var refusedExact = map[string]string{
	"crypto.x509.parse_and_verify_certificates":              "it reads the clock",
	"crypto.x509.parse_and_verify_certificates_with_options": "it reads the clock",
	"strings.render_template":                                unbounded,
	"graph.reachable_paths":                                  unbounded,
	"bits.lsh":                                               unbounded,
}

const unbounded = "one call can do unbounded work that the evaluation deadline cannot interrupt"

func refused(b *ast.Builtin) bool {
	if b.Nondeterministic {
		return true
	}
	if _, ok := refusedExact[b.Name]; ok {
		return true
	}
	for _, p := range refusedPrefixes {
		if b.Name == p || (strings.HasSuffix(p, ".") && strings.HasPrefix(b.Name, p)) || strings.HasPrefix(b.Name, p+".") {
			return true
		}
	}
	return false
}

// Capabilities returns OPA's capabilities for this version minus every
// builtin that reaches outside the process, with no network access allowed.
func Capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	caps.Builtins = slices.DeleteFunc(caps.Builtins, refused)
	caps.AllowNet = []string{}
	return caps
}

// RefusedBuiltins lists the names of the builtins Arbiter refuses, sorted.
func RefusedBuiltins() []string {
	var out []string
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		if refused(b) {
			out = append(out, b.Name)
		}
	}
	sort.Strings(out)
	return out
}

// refusedBuiltins finds calls of refused builtins, so the load error names
// the builtin, the file and the line instead of OPA's "undefined function".
func refusedBuiltins(modules map[string]*ast.Module) []Problem {
	deny := map[string]bool{}
	for _, name := range RefusedBuiltins() {
		deny[name] = true
	}
	var probs []Problem
	for _, m := range modules {
		ast.WalkTerms(m, func(t *ast.Term) bool {
			ref, ok := t.Value.(ast.Ref)
			if !ok {
				return false
			}
			name := ref.String()
			if deny[name] {
				why := "it reaches outside the process, and Arbiter policies may only read their input and data"
				if r, ok := refusedExact[name]; ok {
					why = r
				}
				p := Problem{Message: fmt.Sprintf("builtin %s is refused: %s", name, why)}
				if t.Location != nil {
					p.File, p.Line = t.Location.File, t.Location.Row
				}
				probs = append(probs, p)
			}
			return false
		})
	}
	sort.Slice(probs, func(i, j int) bool { return probs[i].String() < probs[j].String() })
	return probs
}
