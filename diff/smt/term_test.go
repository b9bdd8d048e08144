package smt

import "testing"

// Cmp folds a comparison of constants for exactly <, <=, > and >=; any
// other op panics (the analysis turns that into unknown) rather than
// folding to false, which a goal could then hold vacuously.
func TestCmpFoldsOnlyComparisons(t *testing.T) {
	b := NewBuilder(0)
	one, two := b.IntLit(1), b.IntLit(2)
	for _, tt := range []struct {
		op   string
		x, y *Term
		want bool
	}{
		{"<", one, two, true}, {"<", two, one, false}, {"<", one, one, false},
		{"<=", one, two, true}, {"<=", two, one, false}, {"<=", one, one, true},
		{">", two, one, true}, {">", one, two, false}, {">", one, one, false},
		{">=", two, one, true}, {">=", one, two, false}, {">=", one, one, true},
	} {
		if got := b.Cmp(tt.op, tt.x, tt.y); got != b.BoolLit(tt.want) {
			t.Errorf("%s %s %s folded to %s, want %v", tt.x.lit, tt.op, tt.y.lit, got.lit, tt.want)
		}
	}
	for _, op := range []string{"=", "!=", "distinct"} {
		for _, y := range []*Term{one, two} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("Cmp(%q, 1, %s) did not panic", op, y.lit)
					}
				}()
				got := b.Cmp(op, one, y)
				t.Errorf("Cmp(%q, 1, %s) = %v", op, y.lit, got.lit)
			}()
		}
	}
}
