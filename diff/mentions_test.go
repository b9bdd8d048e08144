package diff

import (
	"testing"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// TestTermMentionsSeesFreeVariablesUnderAQuantifier: a quantifier that
// binds one of the variables asked about still mentions another that
// occurs free in its body. Answering no there would let a loop treat a
// value that depends on its own variable as the same on every pass.
func TestTermMentionsSeesFreeVariablesUnderAQuantifier(t *testing.T) {
	b := smt.NewBuilder(0)
	i, j := b.Bound("i", smt.Int), b.Bound("j", smt.Int)
	zero := b.IntLit(0)
	inner := b.Exists([]*smt.Term{i}, b.App("=", smt.Bool, b.App("+", smt.Int, i, j), zero))
	closed := b.Exists([]*smt.Term{i}, b.App("=", smt.Bool, i, zero))
	for _, tc := range []struct {
		name string
		t    *smt.Term
		vars []*smt.Term
		want bool
	}{
		{"j free under a quantifier binding i", inner, []*smt.Term{i, j}, true},
		{"j free, asked alone", inner, []*smt.Term{j}, true},
		{"only i asked, bound there", inner, []*smt.Term{i}, false},
		{"a closed quantifier", closed, []*smt.Term{i, j}, false},
		{"j itself", j, []*smt.Term{i, j}, true},
	} {
		if got := termMentions(tc.t, tc.vars); got != tc.want {
			t.Errorf("%s: termMentions = %v, want %v", tc.name, got, tc.want)
		}
	}
}
