package engine

import (
	"context"
	"path/filepath"
	"testing"
)

// A Background evaluation calls its pause function as it goes, on the
// compiled path and on topdown, and decides what any other evaluation
// decides.
func TestBackgroundEvaluationsPause(t *testing.T) {
	root := copyTree(t, quota)
	editFile(t, filepath.Join(root, quotaPolicy), "reasons := [",
		"failures contains [3, \"never\"] if {\n\tsome i in numbers.range(1, 20000)\n\ti < 0\n}\n\nreasons := [")
	s := mustLoad(t, quotaConfig(root))
	if !s.Compiled()[0].Compiled {
		t.Fatalf("the decision does not run compiled: %+v", s.Compiled())
	}
	ctx := context.Background()
	body := []byte(`{"tenant":"t","used":10}`)
	want, err := s.Decide(ctx, "quota_check", body, Options{})
	if err != nil {
		t.Fatal(err)
	}

	var compiled int
	got, err := s.Decide(Background(ctx, func() { compiled++ }), "quota_check", body, Options{})
	if err != nil || !SameJSON(got.Result, want.Result) {
		t.Fatalf("compiled, in the background: %v %v, want %s", got, err, want.Result)
	}

	def := s.decisions["quota_check"]
	in, err := s.parseInput(ctx, def, body, false)
	if err != nil {
		t.Fatal(err)
	}
	var topdown int
	v, err := s.eval(Background(ctx, func() { topdown++ }), def, in.Value)
	if err != nil {
		t.Fatal(err)
	}
	out, err := def.checkResult(v)
	if err != nil || !SameJSON(out, want.Result) {
		t.Fatalf("topdown, in the background: %s %v, want %s", out, err, want.Result)
	}
	// 20000 iterations: the compiled evaluator pauses every 128 steps,
	// topdown every 32 expressions.
	if compiled < 20000/128 || topdown < 20000/32 {
		t.Errorf("paused %d times compiled and %d times on topdown", compiled, topdown)
	}
	t.Logf("paused %d times compiled, %d times on topdown", compiled, topdown)
}
