package ireval

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// compileModule plans and compiles data.test.<rule> of one module.
func compileModule(t *testing.T, src, rule string, data ast.Value) *Program {
	t.Helper()
	m, err := ast.ParseModuleWithOpts("test.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := Plan(context.Background(), map[string]*ast.Module{"test.rego": m}, ast.CapabilitiesForThisVersion(), "test/"+rule)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Compile(policy, "test/"+rule, data)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// runaway's rules would run for hours: p scans 10^10 pairs in the plan
// (keeping none, so that it runs long without growing), q builds a range
// of 10^12 numbers inside the builtin.
const runaway = `package test

p := count({i | some i in numbers.range(1, 100000); some j in numbers.range(1, 100000); i == j + 100000})

q := count(numbers.range(1, 1000000000000))
`

// TestDeadlineStopsRunawayLoops: a plan that would run for hours stops at
// its deadline, whether it loops in the plan (nested scans) or inside a
// builtin (numbers.range checks the cancellation the evaluator hands it).
// What proves it is the error: the deadline's own, returned only once the
// deadline has passed, so the loop itself saw it. The context's 10 s are a
// hang guard only, never a measure: were the deadline not checked, the
// context would stop the plan (q's range grows by gigabytes meanwhile) with
// a context error, which fails the test.
func TestDeadlineStopsRunawayLoops(t *testing.T) {
	for _, rule := range []string{"p", "q"} {
		t.Run(rule, func(t *testing.T) {
			prog := compileModule(t, runaway, rule, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			deadline := time.Now().Add(100 * time.Millisecond)
			_, err := prog.Eval(ctx, ast.NewObject(), EvalOptions{Deadline: deadline})
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindCancelled || e.Err != nil {
				t.Fatalf("runaway plan: %v, want the deadline's cancellation, not the hang guard's", err)
			}
			if time.Now().Before(deadline) {
				t.Errorf("the evaluation reported its deadline before the deadline passed")
			}
		})
	}
}

// TestContextCancelStopsEvaluation: a caller going away stops the
// evaluation as the deadline does.
func TestContextCancelStopsEvaluation(t *testing.T) {
	prog := compileModule(t, runaway, "p", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := prog.Eval(ctx, ast.NewObject(), EvalOptions{})
		done <- err
	}()
	cancel()
	err := <-done
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindCancelled || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled evaluation: %v", err)
	}
}

// TestUndefinedIsNotFalse: an undefined result is ErrUndefined, a false one
// is a value.
func TestUndefinedIsNotFalse(t *testing.T) {
	src := "package test\n\nu := input.missing\n\nf := input.x == 1\n"
	if _, err := compileModule(t, src, "u", nil).Eval(context.Background(), ast.NewObject(), EvalOptions{}); !errors.Is(err, ErrUndefined) {
		t.Errorf("undefined rule: %v, want ErrUndefined", err)
	}
	v, err := compileModule(t, src, "f", nil).Eval(context.Background(), ast.MustParseTerm(`{"x": 2}`).Value, EvalOptions{})
	if err != nil || v.Compare(ast.Boolean(false)) != 0 {
		t.Errorf("false rule: %v %v, want false", v, err)
	}
}

// TestProgramIsSafeForConcurrentUse evaluates one Program from many
// goroutines (run with -race).
func TestProgramIsSafeForConcurrentUse(t *testing.T) {
	modules, data, inputs := loadSemantics(t)
	parsed := map[string]*ast.Module{}
	for f, src := range modules {
		parsed[f] = ast.MustParseModuleWithOpts(src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	}
	policy, err := Plan(context.Background(), parsed, ast.CapabilitiesForThisVersion(), "semantics/statements")
	if err != nil {
		t.Fatal(err)
	}
	dv := ast.MustInterfaceToValue(data)
	prog, err := Compile(policy, "semantics/statements", dv)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, len(inputs))
	for i, in := range inputs {
		v, err := prog.Eval(context.Background(), in, EvalOptions{})
		if err == nil {
			want[i] = v.String()
		}
	}
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for n := 0; n < 50; n++ {
				i := (g + n) % len(inputs)
				v, err := prog.Eval(context.Background(), inputs[i], EvalOptions{})
				got := ""
				if err == nil {
					got = v.String()
				}
				if got != want[i] {
					errs <- errors.New("input " + string(rune('0'+i)) + ": " + got + " != " + want[i])
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

var sink *ast.Term

// upsert copies each object on the path once: with the path's objects all
// there it allocates no more than copying the root and inserting the value
// does (the refactor once made an empty object per level and threw it away).
func TestUpsertMakesOneObjectPerLevel(t *testing.T) {
	root := ast.MustParseTerm(`{"a": {"b": 1, "c": 2}, "d": 3}`)
	path := []*ast.Term{ast.StringTerm("a"), ast.StringTerm("b")}
	v := ast.IntNumberTerm(4)
	got, ok := upsert(root, path, v)
	if want := ast.MustParseTerm(`{"a": {"b": 4, "c": 2}, "d": 3}`); !ok || !got.Equal(want) {
		t.Fatalf("upsert = %v, %v; want %v", got, ok, want)
	}
	if a := ast.MustParseTerm(`{"b": 1, "c": 2}`); !root.Value.(ast.Object).Get(ast.StringTerm("a")).Equal(a) {
		t.Fatalf("upsert changed the shared root: %v", root)
	}
	n := testing.AllocsPerRun(100, func() { upsert(root, path, v) })
	copies := testing.AllocsPerRun(100, func() {
		top := copyOrNew(root.Value.(ast.Object))
		a := copyOrNew(top.Get(path[0]).Value.(ast.Object))
		top.Insert(path[0], ast.NewTerm(a))
		a.Insert(path[1], v)
		sink = ast.NewTerm(top)
	})
	if n > copies {
		t.Errorf("upsert allocates %v times, copying the path %v", n, copies)
	}
}
