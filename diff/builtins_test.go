package diff

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// sort() of an array keeps every member with its own guard, in order,
// also when two members hold the same constant term (the plan shares
// one term among equal constants): naming a member by its term once gave
// the later one's guard to both, and a loosening through the earlier
// member's condition could be answered none.
func TestSortedMembersKeepsEachGuard(t *testing.T) {
	vs := newVals(0)
	b := vs.b
	zz, aa := ast.StringTerm("zz"), ast.StringTerm("aa")
	g := []*smt.Term{b.Var("g0", smt.Bool), b.Var("g1", smt.Bool), b.Var("g2", smt.Bool)}
	col := &coll{kind: kArray, elems: []*elem{{g: g[0], v: conc{zz}}, {g: g[1], v: conc{aa}}, {g: g[2], v: conc{zz}}}}
	got, ok := sortedMembers(&analysis{vs: vs}, col)
	if !ok || len(got) != 3 {
		t.Fatalf("sortedMembers: %d members, ok %v; want 3", len(got), ok)
	}
	for i, want := range []struct {
		g *smt.Term
		t *ast.Term
	}{{g[1], aa}, {g[0], zz}, {g[2], zz}} {
		if got[i].g != want.g || got[i].v.(conc).t != want.t {
			t.Errorf("member %d: %v under %v; want %v under %v", i, got[i].v.(conc).t, got[i].g, want.t, want.g)
		}
	}
}
