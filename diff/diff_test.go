package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/corpus"
	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/race"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/shadow"
)

// edit is one edit of the corpus (testdata/edits/NAME/edit.json): string
// replacements in copies of the repository's policies/ and schemas/, and
// the truth of it, known to whoever wrote it: a loosening lets some input
// the schemas admit be refused by the base and allowed by the edit, a safe
// edit none.
type edit struct {
	Note  string `json:"note"`
	Class string `json:"class"` // "loosening" or "safe"
	// CI: the edit is one of the subset make test runs (a minute on two
	// cores); make diff-corpus runs them all.
	CI    bool `json:"ci"`
	Edits []struct {
		File string `json:"file"`
		Old  string `json:"old"`
		New  string `json:"new"`
	} `json:"edits"`
	// Witness, of a loosening, is an input that shows it: stock OPA must
	// decide it refuse_to_allow, and the diff must not answer none for its
	// decision (however far it stands from the fixtures and the inputs
	// generate draws).
	Witness *struct {
		Decision string          `json:"decision"`
		Input    json.RawMessage `json:"input"`
	} `json:"witness"`
}

// base is the revision the edits of the corpus apply to: a copy of the
// shipped policies, schemas and fixtures as they were when the corpus was
// written, so that a rule edit to the shipped files (which must pass
// make test without a Go edit) never breaks an edit's string replacement
// or its expected verdicts.
const base = "testdata/base"

// corpusBudget is the time budget of TestEdits' diffs: five times the
// default, so that a loaded machine (make test runs packages side by
// side) moves its goldens less: a question the default decides in 3 s
// when quiet may take three times that. The two edits make test runs
// are far from it; in a full run beside other builds a few verdicts near
// it still move. docs/DIFF.md's table measures the default, on the
// command line.
const corpusBudget = 5 * DefaultBudget

// TestEdits diffs the base policies against each edit of the corpus. Its
// verdicts are golden (want.json, written by -update). Whatever the golden
// says: a loosening answered none for every decision is a false none, and
// fails; every found example is decided again under stock OPA (OPA's rego
// package on the policy files, the schema library on the schema files),
// outside the engine, and must change as claimed; every none is checked
// against generated schema-valid inputs decided by stock OPA, none of
// which may change so. make test runs the edits marked ci, make
// diff-corpus (DIFF_CORPUS=1) all of them.
func TestEdits(t *testing.T) {
	race.Skip(t)
	// The corpus edits its own copy of the base, never the shipped rules.
	if os.Getenv("DIFF_CORPUS") == "" {
		ruleedit.Skip(t)
	}
	dirs, err := filepath.Glob("testdata/edits/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no edits: %v", err)
	}
	// Inputs generated per decision to check a none against: 20,000 in
	// make diff-corpus (2,000 with -short), 500 in make test.
	all := os.Getenv("DIFF_CORPUS") != ""
	n := 500
	switch {
	case all && testing.Short():
		n = 2000
	case all:
		n = 20000
	}
	ctx := context.Background()
	old := stockLoad(t, base)
	oldSnap := load(t, base)
	fixtures, err := engine.LoadFixtures(filepath.Join(base, "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, dir := range dirs {
		var e edit
		testfiles.ReadJSON(t, filepath.Join(dir, "edit.json"), &e)
		if e.Class != "loosening" && e.Class != "safe" {
			t.Fatalf("%s: class %q, want loosening or safe", dir, e.Class)
		}
		if !all && !e.CI {
			continue
		}
		ran++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			root := applyEdit(t, e)
			newSnap := load(t, root)
			rep, err := Run(ctx, oldSnap, newSnap, fixtures, Options{Budget: corpusBudget})
			if err != nil {
				t.Fatal(err)
			}
			stockNew := stockLoad(t, root)
			verdicts := map[string]map[string]string{}
			loosened := false
			for _, name := range rep.Names() {
				v, _ := newSnap.Verdict(name)
				verdicts[name] = map[string]string{}
				var generated map[shadow.Class][]byte // an input of each class, under stock OPA
				for _, q := range Questions {
					a := rep.Decisions[name].Get(q)
					verdicts[name][QuestionName(q)] = a.Verdict
					t.Logf("%s %s: %s %s", name, QuestionName(q), a.Verdict, a.Reason)
					if q == shadow.RefuseToAllow && a.Verdict != None {
						loosened = true
					}
					switch a.Verdict {
					case Found:
						if got := shadow.Classify(v, old.decide(t, name, a.Example), stockNew.decide(t, name, a.Example)); got != q {
							t.Errorf("%s %s: stock OPA classifies the example %s as %s", name, q, a.Example, got)
						}
						if q == shadow.RefuseToAllow && e.Class == "safe" {
							t.Errorf("%s: a safe edit, and the diff found a refuse_to_allow that stock OPA confirms: the edit's class is wrong", name)
						}
					case None:
						if generated == nil {
							generated = map[shadow.Class][]byte{}
							for _, in := range generate(t, name, n, old, stockNew) {
								generated[shadow.Classify(v, old.decide(t, name, in), stockNew.decide(t, name, in))] = in
							}
						}
						if in, ok := generated[q]; ok {
							t.Errorf("%s %s: verdict none, and stock OPA classifies %s as %s", name, q, in, q)
						}
					}
				}
				t.Logf("%s: %.1f s", name, rep.Decisions[name].Seconds)
			}
			if e.Class == "loosening" && !loosened {
				t.Errorf("a loosening, and every decision's refuse_to_allow is none: a false none")
			}
			if w := e.Witness; w != nil {
				var in bytes.Buffer
				if err := json.Compact(&in, w.Input); err != nil {
					t.Fatal(err)
				}
				v, _ := newSnap.Verdict(w.Decision)
				if got := shadow.Classify(v, old.decide(t, w.Decision, w.Input), stockNew.decide(t, w.Decision, w.Input)); got != shadow.RefuseToAllow {
					t.Errorf("the witness of %s is %s under stock OPA, not refuse_to_allow", w.Decision, got)
				}
				if a := rep.Decisions[w.Decision].Get(shadow.RefuseToAllow); a == nil || a.Verdict == None {
					t.Errorf("%s refuse_to_allow: none, and stock OPA decides the witness %s refuse_to_allow: a false none", w.Decision, in.Bytes())
				}
			}
			got, _ := json.MarshalIndent(verdicts, "", "  ")
			golden.Check(t, filepath.Join(dir, "want.json"), append(got, '\n'))
		})
	}
	if ran == 0 {
		t.Fatal("no edit of the corpus is marked ci")
	}
}

// applyEdit writes a copy of the base's policies and schemas with e's
// replacements made, and returns its folder.
func applyEdit(t *testing.T, e edit) string {
	t.Helper()
	root := t.TempDir()
	for _, sub := range []string{"policies", "schemas"} {
		if err := os.CopyFS(filepath.Join(root, sub), os.DirFS(filepath.Join(base, sub))); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range e.Edits {
		testfiles.Edit(t, filepath.Join(root, x.File), x.Old, x.New)
	}
	return root
}

func load(t *testing.T, root string) *engine.Snapshot {
	t.Helper()
	s, err := engine.Load(context.Background(), engine.Config{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stock is a revision under stock OPA: its policy files through OPA's
// loader and rego package, its input schemas through the schema library.
type stock struct {
	root    string
	queries map[string]rego.PreparedEvalQuery
	schemas map[string]*jsonschema.Schema
	// The constants the revision states (in its Rego, its data and its
	// schemas), and the integers next to each number: what generated
	// inputs draw from, so that a bound the edit moves is met on both
	// sides of it.
	nums []json.Number
	strs []string
}

func stockLoad(t *testing.T, root string) *stock {
	t.Helper()
	res, err := loader.NewFileLoader().All([]string{filepath.Join(root, "policies")})
	if err != nil {
		t.Fatal(err)
	}
	store, err := res.Store()
	if err != nil {
		t.Fatal(err)
	}
	s := &stock{root: root, queries: map[string]rego.PreparedEvalQuery{}, schemas: map[string]*jsonschema.Schema{}}
	for _, m := range res.ParsedModules() {
		ast.WalkTerms(m, func(t *ast.Term) bool {
			s.constant(t.Value)
			return false
		})
	}
	walkScalars(res.Documents, func(v any) { s.constant(v) })
	dirs, _ := filepath.Glob(filepath.Join(root, "schemas", "*"))
	for _, d := range dirs {
		name := filepath.Base(d)
		// Strict builtin errors, as the engine asks of OPA: a builtin's
		// error is the decision's error, never an undefined that allows.
		opts := []func(*rego.Rego){rego.Query("data.decisions." + name + ".decision"), rego.Store(store), rego.StrictBuiltinErrors(true)}
		for _, m := range res.ParsedModules() {
			opts = append(opts, rego.ParsedModule(m))
		}
		pq, err := rego.New(opts...).PrepareForEval(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.queries[name] = pq
		sch, err := jsonschema.NewCompiler().Compile(filepath.Join(d, "input.json"))
		if err != nil {
			t.Fatal(err)
		}
		s.schemas[name] = sch
		var doc any
		testfiles.ReadJSON(t, filepath.Join(d, "input.json"), &doc)
		walkScalars(doc, func(v any) { s.constant(v) })
	}
	return s
}

// constant records a constant of the revision: a string, or a number and
// the integers around it.
func (s *stock) constant(v any) {
	var num string
	switch x := v.(type) {
	case ast.String:
		s.strs = append(s.strs, string(x))
		return
	case string:
		s.strs = append(s.strs, x)
		return
	case ast.Number:
		num = string(x)
	case json.Number:
		num = string(x)
	case float64:
		num = strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return
	}
	s.nums = append(s.nums, json.Number(num))
	floor := new(big.Int).Quo(r.Num(), r.Denom())
	for d := int64(-1); d <= 2; d++ {
		s.nums = append(s.nums, json.Number(new(big.Int).Add(floor, big.NewInt(d)).String()))
	}
}

func (s *stock) valid(name string, doc []byte) bool {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	return err == nil && s.schemas[name].Validate(v) == nil
}

// decide decides doc as a caller of stock OPA would: an input its schema
// refuses, an error or an undefined result is a refusal.
func (s *stock) decide(t *testing.T, name string, doc []byte) shadow.Outcome {
	if !s.valid(name, doc) {
		return shadow.Outcome{Error: &decisionlog.RecordError{Code: "input_schema_invalid"}}
	}
	var in any
	if err := decodeJSON(doc, &in); err != nil {
		t.Fatal(err)
	}
	rs, err := s.queries[name].Eval(context.Background(), rego.EvalInput(in))
	if err != nil || len(rs) == 0 {
		return shadow.Outcome{Error: &decisionlog.RecordError{Code: "policy_error"}}
	}
	b, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return shadow.Outcome{Result: b}
}

// generate makes n inputs of decision name that either revision's schema
// accepts: the fixtures varied by package corpus (members swapped between
// fixtures), then each scalar changed at random with some chance to a
// small integer or one next to a number either revision states, the other
// boolean, a string seen in a fixture or stated by either revision (or it
// with a character before or after), or removed.
func generate(t *testing.T, name string, n int, a, b *stock) [][]byte {
	t.Helper()
	base, err := corpus.Generate(filepath.Join(base, "policy_test"), 100, 20, func(d string, body []byte) bool { return d == name })
	if err != nil {
		t.Fatal(err)
	}
	var strs []string
	for _, in := range base {
		var v any
		_ = decodeJSON(in.Body, &v)
		walkScalars(v, func(x any) {
			if s, ok := x.(string); ok && !slices.Contains(strs, s) {
				strs = append(strs, s)
			}
		})
	}
	strs = append(strs, "f", "fx", "g", "h0")
	var nums []json.Number
	for _, r := range []*stock{a, b} {
		nums = append(nums, r.nums...)
		for _, c := range r.strs {
			strs = append(strs, c, c+"x", "x"+c)
		}
	}
	slices.Sort(strs)
	strs = slices.Compact(strs)
	slices.Sort(nums)
	nums = slices.Compact(nums)
	// The constants one revision states and the other does not (what the
	// edit wrote) are drawn as often as all the others.
	var dstrs []string
	var dnums []json.Number
	for _, r := range [][2]*stock{{a, b}, {b, a}} {
		for _, c := range r[0].strs {
			if !slices.Contains(r[1].strs, c) {
				dstrs = append(dstrs, c, c+"x", "x"+c)
			}
		}
		for _, c := range r[0].nums {
			if !slices.Contains(r[1].nums, c) {
				dnums = append(dnums, c)
			}
		}
	}
	rng := rand.New(rand.NewPCG(20, uint64(len(name))))
	var out [][]byte
	for tries := 0; len(out) < n; tries++ {
		if tries > 50*n {
			t.Fatalf("only %d of %d valid inputs", len(out), n)
		}
		var doc any
		_ = decodeJSON(base[rng.IntN(len(base))].Body, &doc)
		ss, ns := strs, nums
		if len(dstrs) > 0 && rng.IntN(2) == 0 {
			ss = dstrs
		}
		if len(dnums) > 0 && rng.IntN(2) == 0 {
			ns = dnums
		}
		if rng.IntN(2) == 0 {
			doc = mutate(doc, rng, ss, ns)
		} else {
			substitute(doc, rng, 1+rng.IntN(2), ss, ns)
		}
		body := encodeJSON(doc)
		if a.valid(name, body) || b.valid(name, body) {
			out = append(out, body)
		}
	}
	return out
}

func mutate(v any, rng *rand.Rand, strs []string, nums []json.Number) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if rng.IntN(80) == 0 {
				delete(x, k)
				continue
			}
			x[k] = mutate(e, rng, strs, nums)
		}
		return x
	case []any:
		for i := range x {
			x[i] = mutate(x[i], rng, strs, nums)
		}
		if len(x) > 0 && rng.IntN(20) == 0 {
			return x[:0]
		}
		return x
	}
	if rng.IntN(12) != 0 {
		return v
	}
	switch x := v.(type) {
	case bool:
		return !x
	case json.Number:
		if len(nums) > 0 && rng.IntN(2) == 0 {
			return nums[rng.IntN(len(nums))]
		}
		return json.Number([]string{"0", "1", "2", "3", "4", "5", "1e0", "3.0"}[rng.IntN(8)])
	case string:
		return strs[rng.IntN(len(strs))]
	case nil:
		return []any{true, json.Number("1"), "f"}[rng.IntN(3)]
	}
	return v
}

// substitute changes k scalars of doc, chosen at random, each to a
// constant of its type (a bound either revision states), the value of
// another scalar of its type (equal, one more or less, one character
// longer: what a comparison of two fields turns on), null, or removes it:
// a fixture with one or two leaves at a bound is where a loosening
// usually shows.
func substitute(doc any, rng *rand.Rand, k int, strs []string, nums []json.Number) {
	type leaf struct {
		v        any
		set, del func(any)
	}
	var leaves []leaf
	var walk func(v any, set, del func(any))
	walk = func(v any, set, del func(any)) {
		switch x := v.(type) {
		case map[string]any:
			for key, e := range x {
				walk(e, func(n any) { x[key] = n }, func(any) { delete(x, key) })
			}
		case []any:
			for i, e := range x {
				walk(e, func(n any) { x[i] = n }, nil)
			}
		default:
			if set != nil {
				leaves = append(leaves, leaf{v, set, del})
			}
		}
	}
	walk(doc, nil, nil)
	if len(leaves) == 0 {
		return
	}
	for range k {
		l := leaves[rng.IntN(len(leaves))]
		other := leaves[rng.IntN(len(leaves))].v
		switch r := rng.IntN(10); {
		case r < 5:
			switch l.v.(type) {
			case json.Number:
				if len(nums) > 0 {
					l.set(nums[rng.IntN(len(nums))])
				}
			case string:
				l.set(strs[rng.IntN(len(strs))])
			default:
				l.set(mutate(l.v, rng, strs, nums))
			}
		case r < 7:
			if n, ok := other.(json.Number); ok {
				if _, same := l.v.(json.Number); same {
					l.set(n)
					if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
						l.set(json.Number(strconv.FormatInt(i+int64(rng.IntN(3))-1, 10)))
					}
				}
			}
			if o, ok := other.(string); ok {
				if _, same := l.v.(string); same {
					l.set([]string{o, o + "x", o + "\n", "x" + o}[rng.IntN(4)])
				}
			}
		case r < 8 || l.del == nil:
			l.set(nil)
		default:
			l.del(nil)
		}
	}
}

func walkScalars(v any, f func(any)) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			walkScalars(e, f)
		}
	case []any:
		for _, e := range x {
			walkScalars(e, f)
		}
	default:
		f(v)
	}
}
