package input

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const repoRoot = "../.."

var (
	fixturesOnce sync.Once
	fixtureSet   []fixtureBody
	fixturesErr  error
)

// fixtureBody is the request body of one repository fixture.
type fixtureBody struct {
	decision, name string
	body           []byte
	wantInvalid    bool // the fixture wants malformed_json or input_schema_invalid
}

// fixtures reads every case of ../../policy_test/fixtures/<decision>/*.json.
// (The engine's own fixture loader cannot be used here: engine imports
// this package.)
func fixtures(tb testing.TB) []fixtureBody {
	tb.Helper()
	fixturesOnce.Do(func() {
		files, _ := filepath.Glob(filepath.Join(repoRoot, "policy_test", "fixtures", "*", "*.json"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				fixturesErr = err
				return
			}
			var cases map[string]struct {
				Input     json.RawMessage `json:"input"`
				Body      *string         `json:"body"`
				WantError *struct {
					Code string `json:"code"`
				} `json:"want_error"`
			}
			if err := json.Unmarshal(data, &cases); err != nil {
				fixturesErr = err
				return
			}
			decision := filepath.Base(filepath.Dir(f))
			for name, c := range cases {
				fb := fixtureBody{decision: decision, name: name, body: c.Input}
				if c.Body != nil {
					fb.body = []byte(*c.Body)
				}
				if c.WantError != nil {
					fb.wantInvalid = c.WantError.Code == "malformed_json" || c.WantError.Code == "input_schema_invalid"
				}
				fixtureSet = append(fixtureSet, fb)
			}
		}
		sort.Slice(fixtureSet, func(i, j int) bool {
			return fixtureSet[i].decision+"/"+fixtureSet[i].name < fixtureSet[j].decision+"/"+fixtureSet[j].name
		})
	})
	if fixturesErr != nil {
		tb.Fatal(fixturesErr)
	}
	if len(fixtureSet) == 0 {
		tb.Fatal("no fixtures under " + repoRoot + "/policy_test/fixtures")
	}
	return fixtureSet
}

func fixtureBodies(tb testing.TB) [][]byte {
	var out [][]byte
	for _, f := range fixtures(tb) {
		out = append(out, f.body)
	}
	return out
}

var (
	repoSchemasMu sync.Mutex
	repoSchemas   = map[string]*jsonschema.Schema{}
)

// repoSchema compiles ../../schemas/<decision>/input.json with the library
// alone (its own JSON reader, not ours).
func repoSchema(tb testing.TB, decision string) *jsonschema.Schema {
	if tb == nil {
		tb = panicTB{}
	}
	tb.Helper()
	repoSchemasMu.Lock()
	defer repoSchemasMu.Unlock()
	if s, ok := repoSchemas[decision]; ok {
		return s
	}
	path := filepath.Join(repoRoot, "schemas", decision, "input.json")
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		tb.Fatal(err)
	}
	s := compileDoc(tb, path, doc)
	repoSchemas[decision] = s
	return s
}

func compileDoc(tb testing.TB, url string, doc any) *jsonschema.Schema {
	tb.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(url, doc); err != nil {
		tb.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// libraryDoc decodes a body the way the library's users do: encoding/json
// with exact numbers.
func libraryDoc(body []byte) (any, bool) {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, false
	}
	return doc, true
}

// resolves reports whether ptr names a value of doc, or (for a missing
// property only) a key absent from an object of doc.
func resolves(doc any, v Violation) bool {
	if v.Path == "" {
		return true
	}
	if !strings.HasPrefix(v.Path, "/") {
		return false
	}
	tokens := strings.Split(v.Path[1:], "/")
	cur := doc
	for i, tok := range tokens {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[tok]
			if !ok {
				return i == len(tokens)-1 && v.Message == "missing required property"
			}
			cur = next
		case []any:
			n := 0
			for _, ch := range tok {
				if ch < '0' || ch > '9' {
					return false
				}
				n = n*10 + int(ch-'0')
			}
			if tok == "" || (len(tok) > 1 && tok[0] == '0') || n >= len(c) {
				return false
			}
			cur = c[n]
		default:
			return false
		}
	}
	return true
}

// panicTB stands in for a testing.TB outside a test (in a sync.Once).
type panicTB struct{ testing.TB }

func (panicTB) Helper()           {}
func (panicTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// decisions lists the repository's decisions: the folders of ../../schemas.
func decisions(tb testing.TB) []string {
	dirs, err := filepath.Glob(filepath.Join(repoRoot, "schemas", "*", "input.json"))
	if err != nil || len(dirs) == 0 {
		tb.Fatalf("no input schemas under %s/schemas: %v", repoRoot, err)
	}
	var out []string
	for _, d := range dirs {
		out = append(out, filepath.Base(filepath.Dir(d)))
	}
	return out
}

// Streaming reports whether inputs are validated in one pass, and when not,
// why the library validates them alone.
func (s *Schema) Streaming() (bool, string) { return s.why == "", s.why }

// Library returns the library's compiled schema.
func (s *Schema) Library() *jsonschema.Schema { return s.lib }
