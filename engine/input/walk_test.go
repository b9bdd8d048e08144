package input

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func anyObject(t testing.TB) *Schema {
	return NewSchema(compileDoc(t, "any.json", map[string]any{"type": "object"}))
}

// TestProjectionBuildsOnlyWhatItNames: the parts a projection names come
// out exactly as without a projection; the rest is left out, counted or
// kept by kind, as Projection documents.
func TestProjectionBuildsOnlyWhatItNames(t *testing.T) {
	body := `{"run": {"id": "r", "n": 1.0e1}, "state": {"outbox": [{"seq": 1}, {"seq": 2}, {"seq": 3}],
	  "cmds": {"a": {"x": 1}, "b": {"x": 2}}, "big": {"deep": [1, 2, 3]}, "flag": true}, "junk": [{}, {}, {}]}`
	proj := Normalize(&Projection{Keys: map[string]*Projection{
		"run": {All: true},
		"state": {Keys: map[string]*Projection{
			"outbox": {Count: true, Index: map[int]*Projection{1: {Keys: map[string]*Projection{"seq": {}}}}},
			"cmds":   {Count: true},
			"big":    {},
			"flag":   {},
		}},
	}})
	in, err := Parse(context.Background(), []byte(body), anyObject(t), Options{Projection: proj})
	if err != nil {
		t.Fatal(err)
	}
	want := ast.MustParseTerm(`{"run": {"id": "r", "n": 10}, "state": {"outbox": [null, {"seq": 2}, null],
	  "cmds": {"a": null, "b": null}, "big": {}, "flag": true}}`)
	if ast.Compare(in.Value, want.Value) != 0 {
		t.Fatalf("projected value\n got  %v\n want %v", in.Value, want)
	}
	if !bytes.Equal(in.Raw, []byte(body)) {
		t.Fatal("the raw input must be the body as received")
	}
	// Any applies to every member and merges with a named one.
	proj = Normalize(&Projection{Keys: map[string]*Projection{"state": {Keys: map[string]*Projection{
		"cmds": {Any: &Projection{Keys: map[string]*Projection{"x": {}}}, Keys: map[string]*Projection{"a": {Keys: map[string]*Projection{"y": {}}}}},
	}}}})
	in, err = Parse(context.Background(), []byte(body), anyObject(t), Options{Projection: proj})
	if err != nil {
		t.Fatal(err)
	}
	want = ast.MustParseTerm(`{"state": {"cmds": {"a": {"x": 1}, "b": {"x": 2}}}}`)
	if ast.Compare(in.Value, want.Value) != 0 {
		t.Fatalf("projected value\n got  %v\n want %v", in.Value, want)
	}
}

// TestProjectionStillValidatesEverything: what a projection leaves out is
// still scanned strictly and validated against the whole schema.
func TestProjectionStillValidatesEverything(t *testing.T) {
	s := NewSchema(compileDoc(t, "s.json", map[string]any{
		"type": "object",
		"properties": map[string]any{
			"read":   map[string]any{"type": "integer"},
			"unread": map[string]any{"type": "array", "items": map[string]any{"type": "integer", "maximum": 5}},
		},
	}))
	proj := Normalize(&Projection{Keys: map[string]*Projection{"read": {}}})
	for _, tc := range []struct {
		body string
		code string
	}{
		{`{"read": 1, "unread": [1, 2, 6]}`, "invalid"},
		{`{"read": 1, "unread": [1, 2, "x"]}`, "invalid"},
		{`{"read": 1, "unread": [1, 2, 3], "u": {"a": 1, "a": 2}}`, "syntax"},
		{`{"read": 1, "unread": [1, 2, "\ud800"]}`, "syntax"},
		{`{"read": 1, "unread": [1, 2, 3]}`, ""},
	} {
		_, err := Parse(context.Background(), []byte(tc.body), s, Options{Projection: proj})
		var syn *SyntaxError
		var inv *InvalidError
		switch {
		case tc.code == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.code == "invalid" && !errors.As(err, &inv):
			t.Errorf("%s: want a schema violation, got %v", tc.body, err)
		case tc.code == "syntax" && !errors.As(err, &syn):
			t.Errorf("%s: want a syntax error, got %v", tc.body, err)
		}
	}
}

// TestValueCap: the values of an input are counted while reading, the
// unbuilt ones too, and an input over the cap is refused before it costs
// more.
func TestValueCap(t *testing.T) {
	body := []byte(`{"a": [` + strings.Repeat(`{},`, 99) + `{}]}`) // 102 values
	proj := Normalize(&Projection{Keys: map[string]*Projection{"b": {}}})
	for _, p := range []*Projection{nil, proj} {
		_, err := Parse(context.Background(), body, anyObject(t), Options{MaxValues: 101, Projection: p})
		var le *LimitError
		if !errors.As(err, &le) || le.Max != 101 {
			t.Errorf("projection %v: want a LimitError at 101, got %v", p, err)
		}
		if _, err := Parse(context.Background(), body, anyObject(t), Options{MaxValues: 102, Projection: p}); err != nil {
			t.Errorf("projection %v: 102 values under a cap of 102: %v", p, err)
		}
	}
}

// TestDeadlineStopsReading: a deadline that passes while a large body is
// read stops the walk with the context's error.
func TestDeadlineStopsReading(t *testing.T) {
	body := []byte(`{"a": [` + strings.Repeat(`1,`, 3*admitEvery) + `1]}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Parse(ctx, body, anyObject(t), Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if _, err := Parse(context.Background(), body, anyObject(t), Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestWrappedInput: a Data API body's input is validated and built, its
// raw text kept; violations stay relative to the input document.
func TestWrappedInput(t *testing.T) {
	s := NewSchema(compileDoc(t, "s.json", map[string]any{
		"type": "object", "required": []any{"n"},
		"properties": map[string]any{"n": map[string]any{"type": "integer"}},
	}))
	in, err := Parse(context.Background(), []byte(`{"other": [1, {"x": 2}], "input" : {"n": 1.0} }`), s, Options{DataAPIBody: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(in.Raw) != `{"n": 1.0}` || ast.Compare(in.Value, ast.MustParseTerm(`{"n": 1}`).Value) != 0 {
		t.Fatalf("got %s, %v", in.Raw, in.Value)
	}
	for body, want := range map[string]string{
		`{"input": {"n": "x"}}`: "/n",
		`{"input": {}}`:         "/n",
		`{"inputs": {}}`:        "",
		`{"input": []}`:         "",
		`[]`:                    "",
	} {
		_, err := Parse(context.Background(), []byte(body), s, Options{DataAPIBody: true})
		var inv *InvalidError
		if !errors.As(err, &inv) || len(inv.Violations) == 0 || inv.Violations[0].Path != want {
			t.Errorf("%s: want a violation at %q, got %v", body, want, err)
		}
	}
	for _, body := range []string{`{"input": {"n": 1}, "input": {"n": 2}}`, `{"input": {"n": 1}} x`} {
		var syn *SyntaxError
		if _, err := Parse(context.Background(), []byte(body), s, Options{DataAPIBody: true}); !errors.As(err, &syn) {
			t.Errorf("%s: want a syntax error, got %v", body, err)
		}
	}
}

// TestViolationsBounded: a body with a million failing leaves lists
// MaxViolations of them and counts the rest.
func TestViolationsBounded(t *testing.T) {
	s := NewSchema(compileDoc(t, "s.json", map[string]any{
		"type": "object", "properties": map[string]any{"a": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}},
	}))
	body := []byte(`{"a": [` + strings.Repeat(`1,`, 200_000) + `1]}`)
	_, err := Parse(context.Background(), body, s, Options{})
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatal(err)
	}
	if len(inv.Violations) != MaxViolations+1 || inv.Violations[MaxViolations].Message != "199901 more violations not listed" {
		t.Fatalf("got %d violations, last %+v", len(inv.Violations), inv.Violations[len(inv.Violations)-1])
	}
}

// TestSchemasLeftToTheLibrary: schemas whose meaning depends on the path of
// evaluation are validated by the library alone, and still agree.
func TestSchemasLeftToTheLibrary(t *testing.T) {
	doc, err := Decode([]byte(`{"$schema": "https://json-schema.org/draft/2020-12/schema",
	  "$dynamicAnchor": "node", "type": "object",
	  "properties": {"kids": {"type": "array", "items": {"$dynamicRef": "#node"}}, "n": {"type": "integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSchema(compileDoc(t, "dyn.json", doc))
	if ok, why := s.Streaming(); ok || !strings.Contains(why, "DynamicRef") {
		t.Fatalf("Streaming() = %v, %q; want the library to validate", ok, why)
	}
	for _, body := range []string{`{"n": 1, "kids": [{"n": 2}]}`, `{"n": 1, "kids": [{"n": "x"}]}`, `{"n": 1.5}`} {
		agree(t, s, []byte(body))
	}
}

// TestEmptyKeywordsCheckNothing: a schema whose keywords are empty
// (properties: {}) checks nothing of its own, so it takes no place in the
// sets the one pass carries: 70 of them under one allOf stay in the one
// pass, below its 64 schemas a value.
func TestEmptyKeywordsCheckNothing(t *testing.T) {
	branches := strings.Repeat(`{"properties": {}, "patternProperties": {}},`, 70)
	doc, err := Decode([]byte(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
	  "allOf": [` + strings.TrimSuffix(branches, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSchema(compileDoc(t, "empty.json", doc))
	if ok, why := s.Streaming(); !ok {
		t.Fatalf("Streaming() = false, %q: empty keywords took places in a set", why)
	}
	for _, body := range []string{`{"a": 1}`, `[]`} {
		agree(t, s, []byte(body))
	}
}
