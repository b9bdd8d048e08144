package engine

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestFastSchemaCoversRepositorySchemas(t *testing.T) {
	s := mustLoad(t, repo)
	for _, name := range s.Names() {
		if s.decisions[name].fastInput == nil {
			_, err := compileFast(s.decisions[name].inputDoc)
			t.Errorf("decision %s: input schema not covered by the fast validator: %v", name, err)
		}
	}
}

func TestFastSchemaRefusesWhatItDoesNotImplement(t *testing.T) {
	for _, doc := range []string{
		`{"anyOf": [{"type": "string"}]}`,
		`{"properties": {"a": {"format": "date-time"}}}`,
		`{"items": [{"type": "string"}]}`,
		`{"enum": [{"a": 1}]}`,
		`{"$ref": "http://example.com/s.json"}`,
		`{"patternProperties": {"^a": {}}}`,
	} {
		v, err := decodeStrict([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := compileFast(v); err == nil {
			t.Errorf("compileFast(%s) succeeded; it must refuse and leave the schema to the general validator", doc)
		}
	}
}

// mutations derive schema-edge inputs from a valid document: every leaf
// replaced by values of other types and boundary numbers, keys dropped and
// added. Each is judged by both validators.
func mutations(doc any, rng *rand.Rand) []any {
	repl := []any{nil, true, "", "x", strings.Repeat("y", 600), "a\x01b", json.Number("0"), json.Number("-1"),
		json.Number("1"), json.Number("2"), json.Number("3"), json.Number("1.5"), json.Number("1.0"), json.Number("1e2"),
		json.Number("18446744073709551615"), json.Number("18446744073709551616"), json.Number("-0"), json.Number("33"),
		[]any{}, []any{"a"}, map[string]any{}, map[string]any{"k": json.Number("1")}}
	var out []any
	var walk func(path []any)
	walk = func(path []any) {
		cur := getPath(doc, path)
		for _, r := range repl {
			if rng.Intn(3) == 0 {
				out = append(out, setPath(deepCopy(doc), path, r))
			}
		}
		switch c := cur.(type) {
		case map[string]any:
			out = append(out, setPath(deepCopy(doc), append(append([]any{}, path...), "zz_unknown"), json.Number("1")))
			for k := range c {
				cp := deepCopy(doc)
				if m, ok := getPath(cp, path).(map[string]any); ok {
					delete(m, k)
				}
				out = append(out, cp)
				walk(append(append([]any{}, path...), k))
			}
		case []any:
			for i := range c {
				walk(append(append([]any{}, path...), i))
			}
		}
	}
	walk(nil)
	return out
}

func getPath(doc any, path []any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			doc = doc.(map[string]any)[k]
		case int:
			doc = doc.([]any)[k]
		}
	}
	return doc
}

func setPath(doc any, path []any, v any) any {
	if len(path) == 0 {
		return v
	}
	parent := getPath(doc, path[:len(path)-1])
	switch k := path[len(path)-1].(type) {
	case string:
		if m, ok := parent.(map[string]any); ok {
			m[k] = v
		}
	case int:
		if a, ok := parent.([]any); ok {
			a[k] = v
		}
	}
	return doc
}

// TestFastValidatorAgreesWithReference: on every fixture and thousands of
// mutations of them, the single-pass validator and the general JSON Schema
// validator accept exactly the same inputs, and an accepted input converts to
// the same ast.Value as the general path builds.
func TestFastValidatorAgreesWithReference(t *testing.T) {
	s := mustLoad(t, repo)
	fixtures, err := LoadFixtures(repoTests)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	checked := 0
	for _, fx := range fixtures {
		def := s.decisions[fx.Decision]
		if def == nil || def.fastInput == nil || fx.Input == nil {
			continue
		}
		doc, err := decodeStrict(fx.Input)
		if err != nil {
			continue
		}
		cases := []any{doc}
		if fx.WantResult != nil && rng.Intn(10) == 0 {
			cases = append(cases, mutations(doc, rng)...)
		}
		for _, c := range cases {
			body, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			checkAgreement(t, def, body)
			checked++
		}
	}
	if checked < 1000 {
		t.Errorf("only %d inputs compared", checked)
	}
	t.Logf("fast and reference validators agree on %d inputs", checked)
}

func checkAgreement(t *testing.T, def *decisionDef, body []byte) {
	t.Helper()
	for _, wrapped := range []bool{false, true} {
		b := body
		if wrapped {
			b = []byte(`{"input":` + string(body) + `}`)
		}
		fastV, _, fastOK, fastErr := parseValidate(b, def.fastInput, wrapped)
		doc, _, slowErr := decodeInput(b, wrapped)
		if (fastErr != nil) != (slowErr != nil && ErrorCode(slowErr) == CodeMalformedJSON) {
			t.Fatalf("syntax verdicts differ on %s: fast %v, general %v", b, fastErr, slowErr)
		}
		if fastErr != nil {
			continue
		}
		slowOK := slowErr == nil && def.inputSchema.Validate(doc) == nil
		if fastOK != slowOK {
			verr := fmt.Sprint(slowErr)
			if slowErr == nil {
				verr = fmt.Sprint(def.inputSchema.Validate(doc))
			}
			t.Fatalf("validators disagree (fast %v, reference %v) on %s\nreference: %s", fastOK, slowOK, b, verr)
		}
		if fastOK {
			want, err := ast.InterfaceToValue(doc)
			if err != nil {
				t.Fatal(err)
			}
			if want.Compare(fastV) != 0 {
				t.Fatalf("fast path built %v, general path %v", fastV, want)
			}
		}
	}
}
