package smt

import "testing"

// Expr writes a term not defined yet whole, repeating its shared
// subterms: for a deep one (a get-value of the trace's formulas) that text
// grows with 2^depth, and past exprLimit Expr declines instead of holding
// it in memory (it once took 24 GB before the process was killed).
func TestExprBoundsItsText(t *testing.T) {
	b := NewBuilder(0)
	x := b.Var("x", Int)
	s := NewScript(b)
	s.Assert(b.Cmp(">=", x, b.IntLit(0)))
	_ = s.Take()
	small := b.Add(Int, x, b.IntLit(1))
	if got, ok := s.Expr(small); !ok || got != "(+ x 1)" {
		t.Fatalf("Expr(x+1) = %q, %v; want (+ x 1), true", got, ok)
	}
	deep := x
	for range 22 { // about 2^22 copies of x: over exprLimit
		deep = b.Add(Int, deep, deep)
	}
	if got, ok := s.Expr(deep); ok {
		t.Fatalf("Expr of a term 2^22 leaves long wrote %d bytes, want it declined past %d", len(got), exprLimit)
	}
	if s.Take() != "" {
		t.Fatal("Expr wrote to the script")
	}
}
