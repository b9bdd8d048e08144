package ireval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"

	"github.com/arbiter-dev/arbiter/internal/race"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
)

// semanticsDir holds hand-written Rego that makes the planner emit every
// statement kind of the IR, and exercises what an evaluator most easily
// gets wrong: undefined against false, else order, set and object order,
// exact integers at the u64 limit in every JSON number form, strict builtin
// errors and conflicts.
const semanticsDir = "testdata/semantics"

// expectedDeferrals are the queries where the compiled evaluation may not
// answer and topdown must be asked: topdown's early exit skips a body whose
// error the plan evaluates (errors.rego).
var expectedDeferrals = map[string]bool{
	"data.semantics.errors.early": true,
	"data.semantics.errors":       true, // the package's extent holds early
}

func loadSemantics(t *testing.T) (map[string]string, map[string]any, []ast.Value) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(semanticsDir, "*.rego"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no modules in %s: %v", semanticsDir, err)
	}
	modules := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		modules[f] = string(b)
	}
	var data any
	decode(t, filepath.Join(semanticsDir, "data.json"), &data)
	var docs []any
	decode(t, filepath.Join(semanticsDir, "inputs.json"), &docs)
	var inputs []ast.Value
	for _, d := range docs {
		v, err := ast.InterfaceToValue(d)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, v)
	}
	inputs = append(inputs, nil) // no input document at all
	return modules, map[string]any{"semantics": data}, inputs
}

func decode(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// ruleRefs lists data.<package>.<rule> for every rule of modules, and each
// package as a whole.
func ruleRefs(t *testing.T, modules map[string]string) []string {
	t.Helper()
	seen := map[string]bool{}
	for f, src := range modules {
		m, err := ast.ParseModuleWithOpts(f, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		seen[m.Package.Path.String()] = true
		for _, r := range m.Rules {
			if len(r.Head.Args) > 0 {
				continue
			}
			seen[m.Package.Path.Extend(r.Head.Ref().GroundPrefix()).String()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// TestSemantics decides every rule and package of testdata/semantics on
// every input through topdown and the compiled plan, and checks that the
// plans together use every statement kind of the IR.
func TestSemantics(t *testing.T) {
	ruleedit.Skip(t)
	race.Skip(t)
	modules, data, inputs := loadSemantics(t)
	refs := ruleRefs(t, modules)
	kinds := map[string]int{}
	ctx := context.Background()
	agreed := 0
	for _, ref := range refs {
		for i, in := range inputs {
			c := diffCase{name: ref, modules: modules, data: data, input: in, query: "x := " + ref}
			r := runDiff(ctx, c)
			switch {
			case r.verdict == agree:
				agreed++
				checkProjected(t, lastProgram(), in, r.topdown, ref)
			case r.verdict == deferred && expectedDeferrals[ref]:
			default:
				t.Errorf("%s on input %d: verdict %d: %s", ref, i, r.verdict, indent(r.describe()))
			}
			if prog := lastProgram(); prog != nil {
				for k, n := range statementKinds(prog) {
					kinds[k] += n
				}
			}
		}
	}
	var missing []string
	for k := range ir.StmtKinds() {
		if kinds[k] == 0 && k != "NopStmt" { // the planner never emits NopStmt
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("statement kinds no test plan uses: %s", strings.Join(missing, ", "))
	}
	t.Logf("%d queries on %d inputs: %d agree; statement kinds: %v", len(refs), len(inputs), agreed, kinds)
}

// statementKinds counts the IR statements compiled into p (its plan and
// every function it compiled), by kind: "DotStmt", "ScanStmt", ...
func statementKinds(p *Program) map[string]int {
	kinds := map[string]int{}
	count := func(blocks []*ir.Block) {
		for _, b := range blocks {
			walkStmts(b, func(s ir.Stmt) { kinds[fmt.Sprintf("%T", s)[len("*ir."):]]++ })
		}
	}
	count(planNamed(p.policy, p.entry).Blocks)
	if p.policy.Funcs != nil {
		for _, f := range p.policy.Funcs.Funcs {
			if slices.Contains(p.Functions(), f.Name) {
				count(f.Blocks)
			}
		}
	}
	return kinds
}

func lastProgram() *Program {
	harnessMu.Lock()
	defer harnessMu.Unlock()
	if current == nil {
		return nil
	}
	return current.prog
}

// checkProjected evaluates prog on in built under its InputProjection and
// compares with topdown's outcome on the whole input.
func checkProjected(t *testing.T, prog *Program, in ast.Value, want outcome, what string) {
	t.Helper()
	if prog == nil || in == nil || want.err != nil {
		return
	}
	doc, err := ast.JSON(in)
	if err != nil {
		t.Fatal(err)
	}
	proj, err := Apply(doc, prog.InputProjection())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := prog.EvalResultSet(context.Background(), proj, EvalOptions{})
	if err != nil {
		return // the engine asks topdown
	}
	got := outcome{rs: ast.NewSet(), n: len(rs)}
	for _, v := range rs {
		got.rs.Add(ast.NewTerm(v))
	}
	if r := compare(want, got); r.verdict == disagree {
		t.Errorf("%s projected by %s: %s", what, prog.InputProjection(), indent(r.describe()))
	}
}
