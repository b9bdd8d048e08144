package engine

import (
	"context"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/engine/ireval"
	"github.com/arbiter-dev/arbiter/internal/race"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// The projection's differential tests: each input is built whole and
// under the decision's InputProjection (ireval.Apply, the reference
// builder), and the answers compared. The compiled program on the
// projected input must answer what topdown answers on the whole input,
// and so must topdown on the projected input (the engine asks topdown
// when the compiled program does not answer, on the same built input).

// projectionAgrees checks one request body. Beyond the answers, the input
// walk must build under the decision's projection exactly what ireval.Apply
// builds (when the body passes the schema and the walk builds at all).
func projectionAgrees(t testing.TB, s *Snapshot, def *decisionDef, body []byte, what string) {
	t.Helper()
	prog := def.compiled.program()
	if prog == nil {
		t.Fatalf("%s: decision %s does not run compiled", what, def.name)
	}
	doc, err := input.Decode(body)
	if err != nil {
		return
	}
	if _, ok := doc.(map[string]any); !ok {
		return
	}
	full, err := input.Value(doc) // numbers in their canonical text, as Decide builds them
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	canonical, err := ast.JSON(full)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	proj, err := ireval.Apply(canonical, prog.InputProjection())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if in, err := input.Parse(context.Background(), body, def.input, input.Options{Projection: def.inputProjection()}); err == nil {
		if ast.Compare(in.Value, proj) != 0 {
			t.Fatalf("%s: the input walk built\n  %v\nunder the projection %s; ireval.Apply builds\n  %v", what, in.Value, prog.InputProjection(), proj)
		}
	}
	ctx := context.Background()
	want, werr := s.eval(ctx, def, full)
	td, terr := s.eval(ctx, def, proj)
	switch {
	case (werr == nil) != (terr == nil):
		t.Fatalf("%s: topdown on the whole input: %v %v; on the projected input: %v %v", what, valueOrNil(want), werr, valueOrNil(td), terr)
	case werr != nil && AsError(werr).Code != AsError(terr).Code:
		t.Fatalf("%s: topdown errors differ: %v / %v", what, werr, terr)
	case werr == nil && !sameValue(want, td):
		t.Fatalf("%s: topdown on the whole input %s, on the projected input %s", what, valueString(want), valueString(td))
	}
	got, gerr := prog.Eval(ctx, proj, ireval.EvalOptions{Deadline: time.Now().Add(time.Minute)})
	switch {
	case gerr != nil:
		// The engine asks topdown, checked above.
	case werr != nil:
		t.Fatalf("%s: compiled on the projected input answered %s where topdown failed: %v", what, valueString(got), werr)
	case !sameValue(got, want):
		t.Fatalf("%s: compiled on the projected input %s, topdown on the whole input %s", what, valueString(got), valueString(want))
	}
}

func valueOrNil(v ast.Value) string {
	if v == nil {
		return "<none>"
	}
	return valueString(v)
}

func TestProjectionAgreesOnFixtures(t *testing.T) {
	race.Skip(t)
	for name, set := range snapshots(t) {
		fixtures, err := LoadFixtures(set.fixtures)
		if err != nil {
			t.Fatal(err)
		}
		for _, fx := range fixtures {
			projectionAgrees(t, set.snap, set.snap.decisions[fx.Decision], fx.RequestBody(), name+"/"+fx.Decision+"/"+fx.Name)
		}
	}
}

func TestProjectionAgreesOnCorpus(t *testing.T) {
	race.Skip(t)
	s := mustLoad(t, patient(repo))
	for _, in := range mustCorpus(t, s) {
		projectionAgrees(t, s, s.decisions[in.Decision], in.Body, in.Name)
	}
}

// TestProjectionLeavesOutWhatNoRuleReads: the projections of the
// repository's decisions are much narrower than the corpus inputs (a
// projection of everything would pass the differential tests trivially).
func TestProjectionLeavesOutWhatNoRuleReads(t *testing.T) {
	race.Skip(t)
	s := mustLoad(t, repo)
	var whole, projected int
	for _, in := range mustCorpus(t, s)[:100] {
		doc, err := input.Decode(in.Body)
		if err != nil {
			t.Fatal(err)
		}
		full, _ := ast.InterfaceToValue(doc)
		proj, err := ireval.Apply(doc, s.decisions[in.Decision].compiled.prog.InputProjection())
		if err != nil {
			t.Fatal(err)
		}
		whole += len(full.String())
		projected += len(proj.String())
	}
	t.Logf("projected inputs: %d of %d bytes (%.0f%%)", projected, whole, 100*float64(projected)/float64(whole))
	if projected*2 > whole {
		t.Errorf("the projected corpus is %d of %d bytes: the projection keeps more than half", projected, whole)
	}
}

// FuzzProjectionAgrees: generated inputs, whole and projected.
func FuzzProjectionAgrees(f *testing.F) {
	race.Skip(f)
	s := patientSnapshot(f)
	names := s.Names()
	for i, b := range testfiles.FuzzSeeds(f, fuzzSeeds(f), 64) {
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		projectionAgrees(t, s, s.decisions[names[int(sel)%len(names)]], body, string(body))
	})
}
