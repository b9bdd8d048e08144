package input

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/testfiles"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// libraryValue is the value a policy must see of a document decoded by
// encoding/json: Value's conversion, independent of the walk.
func libraryValue(t testing.TB, doc any) ast.Value {
	v, err := Value(doc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// agree checks Parse against the library on one body: same validity, the
// value the policy sees is the library's document with canonical numbers,
// and every violation names a place in the document. It returns whether
// the library accepted the body.
// countValues counts the JSON values of a decoded document.
func countValues(v any) int {
	n := 1
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			n += countValues(e)
		}
	case []any:
		for _, e := range x {
			n += countValues(e)
		}
	}
	return n
}

func agree(t *testing.T, s *Schema, body []byte) bool {
	t.Helper()
	admitted := 0
	in, err := Parse(context.Background(), body, s, Options{Admit: func(n int) error { admitted += n; return nil }})
	doc, ok := libraryDoc(body)
	var syn *SyntaxError
	var inv *InvalidError
	switch {
	case errors.As(err, &syn):
		if ok && json.Valid(body) {
			if _, derr := Decode(body); derr == nil {
				t.Fatalf("syntax error %v on a body the decoder accepts: %s", err, body)
			}
		}
		return false
	case !ok:
		t.Fatalf("Parse did not reject a body encoding/json cannot read: %s (err %v)", body, err)
	}
	libErr := s.Library().Validate(doc)
	if _, isObj := doc.(map[string]any); !isObj {
		if !errors.As(err, &inv) {
			t.Fatalf("non-object input not rejected: %s: %v", body, err)
		}
		return false
	}
	if _, derr := Decode(body); errors.As(derr, new(*NumberLimitError)) {
		// Valid JSON that the engine does not represent: the library has
		// no say; the walk reports the number where it is.
		if !errors.As(err, &inv) || !slices.ContainsFunc(inv.Violations, func(v Violation) bool {
			return v.Message == numberLimitMessage && resolves(doc, v)
		}) {
			t.Fatalf("a number beyond the limits is not a violation at its place: %.200s: %v", body, err)
		}
		return false
	}
	switch {
	case err == nil && libErr != nil:
		t.Fatalf("Parse accepts what the library rejects:\nbody   %s\nlibrary %v", body, libErr)
	case err != nil && libErr == nil:
		t.Fatalf("Parse rejects what the library accepts:\nbody %s\nerror %v", body, err)
	case err == nil:
		if want := libraryValue(t, doc); ast.Compare(in.Value, want) != 0 {
			t.Fatalf("built value differs:\nbody %s\ngot  %v\nwant %v", body, in.Value, want)
		}
		if string(in.Raw) != string(body) {
			t.Fatalf("raw input differs")
		}
		// The one pass is the server's admission count of values, and
		// says whether the body may be logged as one line as it is.
		if want := countValues(doc); admitted != want {
			t.Fatalf("admitted %d values, the body holds %d: %.200s", admitted, want, body)
		}
		if in.OneLine == bytes.ContainsAny(body, "\r\n") {
			t.Fatalf("OneLine %v for a body with line breaks %v: %q", in.OneLine, !in.OneLine, body)
		}
		return true
	}
	if !errors.As(err, &inv) {
		t.Fatalf("want *InvalidError, got %T %v", err, err)
	}
	if len(inv.Violations) == 0 {
		t.Fatalf("invalid without violations: %s", body)
	}
	for _, v := range inv.Violations {
		if v.Message == "" || !resolves(doc, v) {
			if len(inv.Violations) > MaxViolations && v == inv.Violations[len(inv.Violations)-1] {
				continue
			}
			t.Fatalf("violation %+v does not name a place in %s", v, body)
		}
	}
	return false
}

// TestRepositorySchemasStream: the shipped input schemas are validated in
// the stream, not by the library alone.
func TestRepositorySchemasStream(t *testing.T) {
	for _, d := range decisions(t) {
		s := NewSchema(repoSchema(t, d))
		if ok, why := s.Streaming(); !ok {
			t.Errorf("%s: not streamed: %s", d, why)
		}
	}
}

// TestFixturesAgreeWithLibrary runs every fixture through Parse and the
// library. On the shipped schemas the violations are the library's own,
// path for path and word for word (bounds are worded with exact numbers).
func TestFixturesAgreeWithLibrary(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.decision+"/"+f.name, func(t *testing.T) {
			s := NewSchema(repoSchema(t, f.decision))
			valid := agree(t, s, f.body)
			if valid == f.wantInvalid && f.body != nil {
				// A fixture may want an error from the policy; only
				// schema-level fixtures are expected to be invalid here.
				if valid {
					t.Fatalf("fixture wants a schema error, Parse accepts it")
				}
			}
			_, err := Parse(context.Background(), f.body, s, Options{})
			var inv *InvalidError
			if !errors.As(err, &inv) {
				return
			}
			doc, _ := libraryDoc(f.body)
			if _, isObj := doc.(map[string]any); !isObj {
				return
			}
			want := Violations(s.Library().Validate(doc))
			gotPaths, wantPaths := paths(inv.Violations), paths(want)
			if !reflect.DeepEqual(gotPaths, wantPaths) {
				t.Fatalf("violation paths differ from the library's:\ngot  %v\nwant %v", gotPaths, wantPaths)
			}
		})
	}
}

func paths(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Path)
	}
	return out
}

// TestGeneratedSchemasAgree is the differential test over generated
// schemas (drafts 7 and 2020-12, every keyword class, refs with siblings,
// enum beside const) and instances: the walk and the library never
// disagree on validity, and a valid input is built as the library reads it.
func TestGeneratedSchemasAgree(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	var streamed, valid, invalid int
	for i := 0; i < n; i++ {
		s, streams, bodies := generated(t, uint64(i))
		if streams {
			streamed++
		}
		for _, b := range bodies {
			if agree(t, s, b) {
				valid++
			} else {
				invalid++
			}
		}
	}
	t.Logf("%d schemas (%d streamed), %d valid and %d invalid instances", n, streamed, valid, invalid)
	if streamed < n/2 || valid < n || invalid < n {
		t.Fatalf("the generator lost its spread: %d/%d streamed, %d valid, %d invalid", streamed, n, valid, invalid)
	}
}

// generated builds schema number seed and a few instances of it.
func generated(t testing.TB, seed uint64) (*Schema, bool, [][]byte) {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed*7+1)), draft: 7}
	if seed%2 == 1 {
		g.draft = 2020
	}
	doc := g.document()
	raw := toJSON(doc)
	parsed, err := Decode([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	url := fmt.Sprintf("gen%d.json", seed)
	if err := c.AddResource(url, parsed); err != nil {
		t.Fatal(err)
	}
	lib, err := c.Compile(url)
	if err != nil {
		return generated(t, seed+1<<32) // an invalid schema (a bad pattern); take another
	}
	s := NewSchema(lib)
	streams, _ := s.Streaming()
	x := doc["properties"].(map[string]any)["x"]
	var bodies [][]byte
	for j := 0; j < 4; j++ {
		bodies = append(bodies, []byte(`{"x":`+g.instance(x, 4)+`}`))
	}
	return s, streams, bodies
}

// FuzzGeneratedSchemas drives the schema and instance generator from the
// fuzzer's bytes, and also feeds the raw bytes as an instance.
func FuzzGeneratedSchemas(f *testing.F) {
	f.Add(uint64(1), []byte(`{"x":1}`))
	f.Add(uint64(2), []byte(`{"x":{"a":1.0e0,"b":[true,null]}}`))
	f.Add(uint64(3), []byte(`{"x":"ab"}`))
	f.Fuzz(func(t *testing.T, seed uint64, raw []byte) {
		s, _, bodies := generated(t, seed)
		for _, b := range append(bodies, raw) {
			agree(t, s, b)
		}
	})
}

// TestEveryLibraryFieldIsClassified: a library upgrade that adds a schema
// keyword fails here until someone decides what the walk does with it (and
// until then NewSchema leaves such schemas to the library).
func TestEveryLibraryFieldIsClassified(t *testing.T) {
	typ := reflect.TypeOf(jsonschema.Schema{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.IsExported() && fieldClasses[f.Name] == 0 {
			t.Errorf("jsonschema.Schema.%s is not classified in fieldClasses", f.Name)
		}
	}
}

// FuzzRepositorySchemas: any body against every shipped input schema,
// seeded with every fixture: the walk agrees with the library (validity,
// built value, violations that name places).
func FuzzRepositorySchemas(f *testing.F) {
	for _, b := range testfiles.FuzzSeeds(f, fixtureBodies(f), 64) {
		f.Add(b)
	}
	for _, s := range []string{`{}`, `[]`, `null`, `{"runnerState":{"outbox":[{}],"processedCommands":{"a/b~c":{}}}}`, `{"run":{"a/b":1,"~":2}}`} {
		f.Add([]byte(s))
	}
	var schemas []*Schema
	for _, d := range decisions(f) {
		schemas = append(schemas, NewSchema(repoSchema(f, d)))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, s := range schemas {
			agree(t, s, body)
		}
	})
}
