package engine

import (
	"context"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/engine/ireval"
)

// The projection's differential tests: each input is built whole and
// under the decision's InputProjection (ireval.Apply, the reference
// builder), and the answers compared. The compiled program on the
// projected input must answer what topdown answers on the whole input,
// and so must topdown on the projected input (the engine asks topdown
// when the compiled program does not answer, on the same built input).

// projectionAgrees checks one input document (as decodeStrict returns it).
func projectionAgrees(t testing.TB, s *Snapshot, def *decisionDef, doc any, what string) {
	t.Helper()
	prog := def.compiled.program()
	if prog == nil {
		t.Fatalf("%s: decision %s does not run compiled", what, def.name)
	}
	full, err := ast.InterfaceToValue(doc)
	if err != nil {
		return
	}
	proj, err := ireval.Apply(doc, def.inputProjection())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	ctx := context.Background()
	want, werr := s.eval(ctx, def, full)
	td, terr := s.eval(ctx, def, proj)
	switch {
	case (werr == nil) != (terr == nil):
		t.Fatalf("%s: topdown on the whole input: %v %v; on the projected input: %v %v", what, valueOrNil(want), werr, valueOrNil(td), terr)
	case werr != nil && ErrorCode(werr) != ErrorCode(terr):
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
	for name, set := range snapshots(t) {
		fixtures, err := LoadFixtures(set.fixtures)
		if err != nil {
			t.Fatal(err)
		}
		for _, fx := range fixtures {
			doc, err := decodeStrict(fx.RequestBody())
			if err != nil {
				continue
			}
			if _, ok := doc.(map[string]any); !ok {
				continue
			}
			projectionAgrees(t, set.snap, set.snap.decisions[fx.Decision], doc, name+"/"+fx.Decision+"/"+fx.Name)
		}
	}
}

func TestProjectionAgreesOnCorpus(t *testing.T) {
	s := mustLoad(t, patient(repo))
	for _, in := range mustCorpus(t) {
		doc, err := decodeStrict(in.Body)
		if err != nil {
			t.Fatal(err)
		}
		projectionAgrees(t, s, s.decisions[in.Decision], doc, in.Name)
	}
}

// TestProjectionLeavesOutWhatNoRuleReads: the projections of the
// repository's decisions are much narrower than the corpus inputs (a
// projection of everything would pass the differential tests trivially).
func TestProjectionLeavesOutWhatNoRuleReads(t *testing.T) {
	s := mustLoad(t, repo)
	var whole, projected int
	for _, in := range mustCorpus(t)[:100] {
		doc, err := decodeStrict(in.Body)
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
	s := patientSnapshot(f)
	names := s.Names()
	for i, b := range fuzzSeeds(f) {
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		doc, err := decodeStrict(body)
		if err != nil {
			return
		}
		projectionAgrees(t, s, s.decisions[names[int(sel)%len(names)]], doc, string(body))
	})
}
