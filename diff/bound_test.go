package diff

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/shadow"
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

// TestBudgetEndsInUnknown: a question the decision's time budget leaves
// no time for is unknown and says why, never none. A loosening of the
// corpus (found in every decision with the default budget, in make test)
// diffed within 1 ms: every refuse_to_allow is unknown, naming --budget.
func TestBudgetEndsInUnknown(t *testing.T) {
	var e edit
	testfiles.ReadJSON(t, filepath.Join("testdata", "edits", "budget_plus_one", "edit.json"), &e)
	rep, err := Run(context.Background(), load(t, base), load(t, applyEdit(t, e)), nil, Options{Budget: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range rep.Names() {
		a := rep.Decisions[name].Get(shadow.RefuseToAllow)
		if a.Verdict != Unknown || !strings.Contains(a.Reason, "--budget") {
			t.Errorf("%s refuse_to_allow: %s (%s), want unknown for the budget", name, a.Verdict, a.Reason)
		}
	}
}
