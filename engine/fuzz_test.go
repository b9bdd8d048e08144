package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// Fuzz targets over the decision path. Run them with, for example,
//
//	go test -run '^$' -fuzz '^FuzzDecide$' -fuzztime 60s ./engine/
//
// Every target is seeded with every fixture of ../policy_test (inputs and
// raw malformed bodies alike). testdata/fuzz/<Target>/ keeps the inputs
// that found bugs (numbers that cost seconds to compare exactly, a body
// with a million failing leaves, pointers of keys that need escaping, what
// a lenient decoder accepts) and every crasher a run finds: `go test` runs
// them all as ordinary tests.

// fixtureSeed is one fixture body and the decision it is addressed to.
type fixtureSeed struct {
	decision string
	body     []byte
}

var (
	seedsOnce sync.Once
	seeds     []fixtureSeed
	seedsErr  error
)

// fixtureSeeds returns the request body of every repository fixture.
func fixtureSeeds(tb testing.TB) []fixtureSeed {
	tb.Helper()
	seedsOnce.Do(func() {
		fixtures, err := LoadFixtures(repoTests)
		if err != nil {
			seedsErr = err
			return
		}
		for _, fx := range fixtures {
			seeds = append(seeds, fixtureSeed{decision: fx.Decision, body: fx.RequestBody()})
		}
	})
	if seedsErr != nil {
		tb.Fatal(seedsErr)
	}
	if len(seeds) == 0 {
		tb.Fatal("no fixtures in " + repoTests)
	}
	return seeds
}

// wrap turns a body into an OPA Data API body, byte for byte.
func wrap(body []byte) []byte {
	return append(append([]byte(`{"input":`), body...), '}')
}

var (
	fuzzSnapOnce sync.Once
	fuzzSnap     *Snapshot
	fuzzSnapErr  error
)

// repoSnapshot loads ../policies and ../schemas once per process (each fuzz
// worker is a process of its own).
func repoSnapshot(tb testing.TB) *Snapshot {
	tb.Helper()
	fuzzSnapOnce.Do(func() { fuzzSnap, fuzzSnapErr = Load(context.Background(), repo) })
	if fuzzSnapErr != nil {
		tb.Fatal(fuzzSnapErr)
	}
	return fuzzSnap
}

var (
	refSchemasMu sync.Mutex
	refSchemas   = map[string]*jsonschema.Schema{}
)

// referenceSchema compiles ../schemas/<decision>/<kind>.json on its own, with
// neither our strict decoder nor our schema loader in the way, so that what
// the fuzz targets check is independent of what they test.
func referenceSchema(tb testing.TB, decision, kind string) *jsonschema.Schema {
	tb.Helper()
	refSchemasMu.Lock()
	defer refSchemasMu.Unlock()
	key := decision + "/" + kind
	if s, ok := refSchemas[key]; ok {
		return s
	}
	path := filepath.Join(repo.Schemas, decision, kind+".json")
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		tb.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(path, doc); err != nil {
		tb.Fatal(err)
	}
	s, err := c.Compile(path)
	if err != nil {
		tb.Fatal(err)
	}
	refSchemas[key] = s
	return s
}

// referenceInput decodes a request body with encoding/json (numbers kept
// exactly) and returns the input document it carries. ok is false when
// encoding/json cannot read it, or a Data API body has no input member.
func referenceInput(body []byte, wrapped bool) (doc any, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, false
	}
	if !wrapped {
		return doc, true
	}
	obj, isObj := doc.(map[string]any)
	if !isObj {
		return nil, false
	}
	doc, ok = obj["input"]
	return doc, ok
}

// checkPointers fails t with every pointerProblems finding. A list capped
// at MaxViolations ends with one entry at "" counting the rest, which is
// not a pointer to check (testdata/fuzz/FuzzDecide/violation_explosion).
func checkPointers(t *testing.T, doc any, vs []Violation) {
	t.Helper()
	if n := len(vs); n == MaxViolations+1 && vs[n-1].Path == "" && strings.HasSuffix(vs[n-1].Message, " more violations not listed") {
		vs = vs[:n-1]
	}
	for _, p := range pointerProblems(doc, vs) {
		t.Error(p)
	}
}

// pointerProblems checks that violations are sorted, distinct, syntactically
// valid JSON pointers that resolve against doc, or, for a missing required
// property only, whose parent is an object without that key.
func pointerProblems(doc any, vs []Violation) []string {
	var probs []string
	if !sort.SliceIsSorted(vs, func(i, j int) bool { return vs[i].Path < vs[j].Path }) {
		probs = append(probs, fmt.Sprintf("violations not sorted by path: %+v", vs))
	}
	seen := map[Violation]bool{}
	for _, v := range vs {
		if seen[v] {
			probs = append(probs, fmt.Sprintf("duplicate violation %+v", v))
		}
		seen[v] = true
		tokens, ok := parsePointer(v.Path)
		if !ok {
			probs = append(probs, fmt.Sprintf("violation path %q is not a JSON pointer", v.Path))
			continue
		}
		if v.Message == "" {
			probs = append(probs, fmt.Sprintf("violation at %q has no message", v.Path))
		}
		if _, found := resolvePointer(doc, tokens); found {
			continue
		}
		if len(tokens) == 0 {
			probs = append(probs, "violation at the root does not resolve")
			continue
		}
		parent, found := resolvePointer(doc, tokens[:len(tokens)-1])
		obj, isObj := parent.(map[string]any)
		if !found || !isObj {
			probs = append(probs, fmt.Sprintf("violation path %q resolves neither in the document nor to a key of an object in it", v.Path))
			continue
		}
		if _, has := obj[tokens[len(tokens)-1]]; has || v.Message != "missing required property" {
			probs = append(probs, fmt.Sprintf("violation %+v does not resolve, and is not a missing property", v))
		}
	}
	return probs
}

// parsePointer splits an RFC 6901 pointer into unescaped reference tokens.
func parsePointer(p string) ([]string, bool) {
	if p == "" {
		return nil, true
	}
	if p[0] != '/' {
		return nil, false
	}
	parts := strings.Split(p[1:], "/")
	for i, part := range parts {
		for j := 0; j < len(part); j++ {
			if part[j] == '~' && (j+1 >= len(part) || (part[j+1] != '0' && part[j+1] != '1')) {
				return nil, false
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
	}
	return parts, true
}

func resolvePointer(doc any, tokens []string) (any, bool) {
	cur := doc
	for _, tok := range tokens {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// arrayIndex parses an RFC 6901 array index: 0, or digits without a leading zero.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
		n = n*10 + int(tok[i]-'0')
	}
	return n, true
}

// contractCodes are the codes Decide may return.
var contractCodes = map[Code]bool{
	CodeMalformedJSON: true, CodeInputSchemaInvalid: true, CodeUnknownDecision: true,
	CodePolicyError: true, CodePolicyTimeout: true,
}

// unknownDecision is the selector value FuzzDecide maps to a decision that
// does not exist.
const unknownDecision = 255

// FuzzDecide runs the whole Decide path on the repository's policies, for
// both endpoints' body shapes. Invariants: nothing panics; the outcome is a
// *Decision or an *Error with a contract code; an input that fails its
// schema (checked by a reference validator) is never decided; a decided
// result passes its result schema, and its reasons are codes of the
// decision's reason rules, each once; deciding the same body twice gives the
// same answer.
func FuzzDecide(f *testing.F) {
	snap := repoSnapshot(f)
	names := snap.Names()
	index := map[string]uint8{}
	for i, n := range names {
		index[n] = uint8(i)
	}
	for _, s := range testfiles.FuzzSeeds(f, fixtureSeeds(f), 32) {
		f.Add(index[s.decision], s.body, false)
		f.Add(index[s.decision], wrap(s.body), true)
	}
	f.Add(uint8(unknownDecision), []byte(`{}`), false) // and testdata/fuzz/FuzzDecide

	f.Fuzz(func(t *testing.T, sel uint8, body []byte, wrapped bool) {
		name := "no_such_decision"
		if sel != unknownDecision {
			name = names[int(sel)%len(names)]
		}
		opts := Options{DataAPIBody: wrapped}
		d, err := snap.Decide(context.Background(), name, body, opts)
		checkDecided(t, name, body, wrapped, d, err)

		d2, err2 := snap.Decide(context.Background(), name, body, opts)
		if !sameOutcome(d, err, d2, err2) {
			t.Fatalf("two decisions of the same body differ:\n%s\n%s", describeOutcome(d, err), describeOutcome(d2, err2))
		}
	})
}

// checkDecided checks one outcome of Decide against the invariants.
func checkDecided(t *testing.T, name string, body []byte, wrapped bool, d *Decision, err error) {
	t.Helper()
	if err != nil {
		if d != nil {
			t.Fatalf("Decide returned both a decision and an error %v", err)
		}
		e, ok := err.(*Error)
		if !ok {
			t.Fatalf("Decide returned %T (%v), want *Error", err, err)
		}
		if !contractCodes[e.Code] {
			t.Fatalf("error code %q is not a Decide contract code: %v", e.Code, e)
		}
		switch e.Code {
		case CodeUnknownDecision:
			if name != "no_such_decision" {
				t.Fatalf("unknown_decision for %s", name)
			}
		case CodePolicyError:
			// The repository's policies decide every input their schema
			// accepts; a policy_error here is a refusal for no reason.
			t.Fatalf("policy_error on the repository's policies: %v", e)
		case CodeInputSchemaInvalid:
			if len(e.Violations) == 0 {
				t.Fatalf("input_schema_invalid without violations: %v", e)
			}
			doc, ok := referenceInput(body, wrapped)
			if !ok {
				// A Data API body without input, or not an object.
				if !wrapped || len(e.Violations) != 1 || e.Violations[0].Path != "" {
					t.Fatalf("input_schema_invalid on a body encoding/json cannot read: %+v", e.Violations)
				}
				return
			}
			if _, derr := input.Decode(body); errors.As(derr, new(*input.NumberLimitError)) {
				// Valid JSON beyond the numbers the engine represents:
				// the reference validator has no say, the pointers do.
				checkPointers(t, doc, e.Violations)
				return
			}
			if refErr := referenceSchema(t, name, "input").Validate(doc); refErr == nil {
				t.Fatalf("input_schema_invalid for an input the reference validator accepts: %+v", e.Violations)
			}
			checkPointers(t, doc, e.Violations)
		case CodeMalformedJSON:
			if _, err := input.Decode(body); err == nil && !wrapped {
				t.Fatalf("malformed_json for a body the strict decoder accepts: %v", e)
			}
		}
		return
	}
	if d == nil || len(d.Result) == 0 {
		t.Fatal("Decide returned neither a decision nor an error")
	}
	if name == "no_such_decision" {
		t.Fatal("a decision for a decision that does not exist")
	}
	doc, ok := referenceInput(body, wrapped)
	if !ok {
		t.Fatalf("decided a body encoding/json cannot read (wrapped %v): %q", wrapped, body)
	}
	if refErr := referenceSchema(t, name, "input").Validate(doc); refErr != nil {
		t.Fatalf("decided an input that fails its schema: %v\nresult %s", refErr, d.Result)
	}
	result, ok := referenceInput(d.Result, false)
	if !ok {
		t.Fatalf("result is not JSON: %s", d.Result)
	}
	if refErr := referenceSchema(t, name, "result").Validate(result); refErr != nil {
		t.Fatalf("result fails its schema: %v\n%s", refErr, d.Result)
	}
	codes := map[string]bool{}
	for _, r := range snapshotRules(t, name) {
		codes[r.Reason] = true
	}
	seen := map[string]bool{}
	for _, r := range d.Reasons {
		if !codes[r] || seen[r] {
			t.Fatalf("reason %q is not a reason rule's code or comes twice: %s", r, d.Result)
		}
		seen[r] = true
	}
}

// snapshotRules are the reason rules of a repository decision.
func snapshotRules(tb testing.TB, name string) []RuleInfo {
	return repoSnapshot(tb).decisions[name].rules
}

func sameOutcome(d1 *Decision, err1 error, d2 *Decision, err2 error) bool {
	if (err1 == nil) != (err2 == nil) {
		return false
	}
	if err1 != nil {
		e1, e2 := AsError(err1), AsError(err2)
		return e1.Code == e2.Code && e1.Message == e2.Message && reflect.DeepEqual(e1.Violations, e2.Violations)
	}
	return bytes.Equal(d1.Result, d2.Result) && bytes.Equal(d1.Input, d2.Input) &&
		reflect.DeepEqual(d1.Reasons, d2.Reasons) && d1.Outcome == d2.Outcome && d1.Revision == d2.Revision
}

func describeOutcome(d *Decision, err error) string {
	if err != nil {
		e := AsError(err)
		b, _ := json.Marshal(e.Document())
		return string(b)
	}
	return string(d.Result)
}

// TestFuzzHelpers keeps the fuzz targets' own checks honest: a pointer
// checker that accepted everything would make FuzzValidate pass vacuously.
func TestFuzzHelpers(t *testing.T) {
	doc := map[string]any{"a": map[string]any{"b/c": []any{1, 2}, "~": true}}
	for _, tc := range []struct {
		name string
		vs   []Violation
		ok   bool
	}{
		{"resolves", []Violation{{Path: "/a/b~1c/1", Message: "x"}}, true},
		{"escaped tilde", []Violation{{Path: "/a/~0", Message: "x"}}, true},
		{"root", []Violation{{Path: "", Message: "x"}}, true},
		{"missing key in an object", []Violation{{Path: "/a/zz", Message: "missing required property"}}, true},
		{"missing key, other message", []Violation{{Path: "/a/zz", Message: "property is not allowed"}}, false},
		{"index out of range", []Violation{{Path: "/a/b~1c/2", Message: "x"}}, false},
		{"leading zero index", []Violation{{Path: "/a/b~1c/01", Message: "x"}}, false},
		{"no leading slash", []Violation{{Path: "a", Message: "x"}}, false},
		{"bad escape", []Violation{{Path: "/a/~2", Message: "x"}}, false},
		{"unsorted", []Violation{{Path: "/a", Message: "x"}, {Path: "", Message: "x"}}, false},
		{"duplicate", []Violation{{Path: "/a", Message: "x"}, {Path: "/a", Message: "x"}}, false},
		{"parent not an object", []Violation{{Path: "/a/b~1c/0/k", Message: "missing required property"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probs := pointerProblems(doc, tc.vs)
			if (len(probs) == 0) != tc.ok {
				t.Errorf("pointerProblems(%+v) = %q, want ok=%v", tc.vs, probs, tc.ok)
			}
		})
	}
}
