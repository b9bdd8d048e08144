package engine

import (
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/internal/jsonenc"
)

// TestResultPathAgreesWithReference: for every recorded result and
// thousands of mutations of them, the tree validator and the general JSON
// Schema validator give the same verdict, and the direct encoder writes the
// same bytes as encoding/json over OPA's own conversion.
func TestResultPathAgreesWithReference(t *testing.T) {
	s := mustLoad(t, repo)
	fixtures, err := LoadFixtures(repoTests)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(2))
	checked, rejected := 0, 0
	for _, fx := range fixtures {
		def := s.decisions[fx.Decision]
		if fx.WantResult == nil || def.treeResult == nil {
			continue
		}
		doc, err := decodeStrict(fx.WantResult)
		if err != nil {
			t.Fatal(err)
		}
		cases := []any{doc}
		if rng.Intn(4) == 0 {
			cases = append(cases, mutations(doc, rng)...)
		}
		for _, c := range cases {
			v, err := ast.InterfaceToValue(c)
			if err != nil {
				t.Fatal(err)
			}
			want := def.result.Validate(c) == nil
			if got := validValue(def.treeResult, v); got != want {
				b, _ := json.Marshal(c)
				t.Fatalf("validators disagree (tree %v, reference %v) on result %s", got, want, b)
			}
			if !want {
				rejected++
				continue
			}
			enc, ok := appendJSON(nil, v)
			ref, err := json.Marshal(c)
			if !ok || err != nil || string(enc) != string(ref) {
				t.Fatalf("encoded %s, encoding/json %s", enc, ref)
			}
			checked++
		}
	}
	if checked < 150 || rejected < 500 {
		t.Errorf("compared %d valid and %d invalid results: too few", checked, rejected)
	}
	t.Logf("tree and reference validators agree on %d valid and %d invalid results", checked, rejected)
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "ctl\x00\x01\x1f\n\r\t", "é😀", "\u2028\u2029", "<&>", "\xff bad"} {
		got := jsonenc.AppendString(nil, s)
		want, _ := json.Marshal(s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q: %s is not JSON: %v", s, got, err)
		}
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("%q: round trip %q, encoding/json %q", s, back, wantBack)
		}
	}
}
