package ireval

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestProjectionIsConservative: a rule that can see the whole input, or a
// part of it the analysis cannot name, makes the projection build that
// part whole (issue 11: walk, object.get with a dynamic key,
// json.marshal(input), with input). The first cases are the control: a
// rule reading named paths projects to those paths only, so an analysis
// that gave up everywhere would fail them ({} is a value built if it is a
// scalar, an empty object if not, which no rule here can tell apart; * is
// the whole value).
// print is not among them: the planner erases print statements (as
// topdown without a print hook ignores them), so they observe nothing.
func TestProjectionIsConservative(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		// whole: the root is All; else want is the projection's String.
		whole bool
		want  string
	}{
		{name: "named paths", body: `decision := input.a.b == 1 if { input.c }`, want: `{"a":{"b":{}},"c":{}}`},
		{name: "count only", body: `decision := count(input.xs)`, want: `{"xs":{#count}}`},
		{name: "json.marshal(input)", body: `decision := json.marshal(input)`, whole: true},
		{name: "walk(input)", body: `decision := [p | walk(input, [p, _])]`, whole: true},
		{name: "object.get with a dynamic key", body: `decision := object.get(input, input.k, 0)`, whole: true},
		{name: "dynamic key", body: `decision := input[input.k]`, whole: true},
		{name: "input as a value", body: `decision := {"in": input}`, whole: true},
		{name: "a function given input", body: "f(x) := x.a\n\ndecision := f(input)", want: `{"a":*}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := projectionOf(t, "package decisions.p\n\n"+tt.body+"\n")
			switch {
			case tt.whole && !p.All:
				t.Errorf("projection %s, want the whole input", p)
			case !tt.whole && p.String() != tt.want:
				t.Errorf("projection %s, want %s", p.String(), tt.want)
			}
		})
	}
	// with input replaces the input for the rules it calls: what they read
	// of the replacement is not a path of the caller's input, so the
	// caller's input must be built whole wherever it flows.
	p := projectionOf(t, "package decisions.p\n\ninner := input.x\n\ndecision := x if {\n\tx := inner with input as {\"x\": input.y}\n}\n")
	if !p.All {
		t.Errorf("with input: projection %s, want the whole input", p.String())
	}
}

func projectionOf(t *testing.T, src string) *Projection {
	t.Helper()
	m, err := ast.ParseModuleWithOpts("p.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := Plan(context.Background(), map[string]*ast.Module{"p.rego": m}, ast.CapabilitiesForThisVersion(), "decisions/p/decision")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Compile(policy, "decisions/p/decision", ast.NewObject())
	if err != nil {
		t.Fatal(err)
	}
	return prog.InputProjection()
}
