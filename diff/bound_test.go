package diff

import (
	"context"
	"strings"
	"testing"
)

// The encoding stops growing at Options.MaxTerms, and every answer of the
// decision is then unknown, with the bound as its reason: the analysis
// bounds its own size (the solvers' memory is bounded apart, by
// Options.SolverMemory).
func TestEncodingBoundsItsSize(t *testing.T) {
	s := load(t, base)
	rep, err := Run(context.Background(), s, s, nil, Options{MaxTerms: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range rep.Names() {
		for _, q := range Questions {
			a := rep.Decisions[name].Get(q)
			if a.Verdict != Unknown || !strings.Contains(a.Reason, "exceeds 50 terms") {
				t.Errorf("%s %s: %s (%s), want unknown past the bound of 50 terms", name, QuestionName(q), a.Verdict, a.Reason)
			}
		}
	}
}
