package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/corpus"
	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/race"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// firedOn evaluates one reason rule's own entry with stock OPA (topdown,
// the policies loaded as `opa eval` loads them), on any input, schema or
// not: whether the rule fires.
type firedOn func(t *testing.T, doc ast.Ref, in any) bool

func topdownRules(t *testing.T, policies string) firedOn {
	t.Helper()
	cache := map[string]rego.PreparedEvalQuery{}
	return func(t *testing.T, doc ast.Ref, in any) bool {
		t.Helper()
		q := doc.String()
		pq, ok := cache[q]
		if !ok {
			var err error
			pq, err = rego.New(rego.Query(q), rego.Load([]string{policies}, nil)).PrepareForEval(context.Background())
			if err != nil {
				t.Fatalf("preparing %s: %v", q, err)
			}
			cache[q] = pq
		}
		rs, err := pq.Eval(context.Background(), rego.EvalInput(in))
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return len(rs) > 0
	}
}

// keepOnly is doc with nothing but the values at paths: a path through an
// object keeps that member, one that ends at or passes through anything
// else keeps that value whole, one through a missing member keeps nothing.
func keepOnly(doc any, reads []inputRead) any {
	out := map[string]any{}
	for _, r := range reads {
		src, dst := doc, out
		for i, tok := range r.path {
			obj, ok := src.(map[string]any)
			if !ok {
				break // the root is an object (the schema says so)
			}
			v, ok := obj[tok]
			if !ok {
				break
			}
			if i == len(r.path)-1 {
				dst[tok] = v
				break
			}
			if _, isObj := v.(map[string]any); !isObj {
				dst[tok] = v // null, a scalar or an array: the read stops in it
				break
			}
			next, ok := dst[tok].(map[string]any)
			if !ok {
				next = map[string]any{}
				dst[tok] = next
			}
			src, dst = v, next
		}
	}
	return out
}

// TestEvidenceIsComplete: the input paths found for a reason rule are all
// it depends on. Every reason rule of the repository's policies, on every
// fixture and on a corpus of inputs mutated from them, fires on the input
// cut down to its paths exactly when it fires on the whole input, as stock
// topdown evaluates the rule. A dependency the analysis missed (a helper,
// an else branch, a function, an alias) makes some rule fire differently
// on the cut input, unless no input of the corpus tells them apart.
func TestEvidenceIsComplete(t *testing.T) {
	race.Skip(t)
	s := mustLoad(t, repo)
	fired := topdownRules(t, repo.Policies)
	fixtures := repoFixtures(t)
	var inputs []corpus.Input
	for _, fx := range fixtures {
		if fx.Input != nil && fx.WantError == nil {
			inputs = append(inputs, corpus.Input{Decision: fx.Decision, Name: fx.Name, Body: fx.Input})
		}
	}
	gen, err := corpus.Generate(repoTests, 300, 14, decidedBy(s))
	if err != nil {
		t.Fatal(err)
	}
	inputs = append(inputs, gen...)
	checked, differ := 0, 0
	checked, differ = checkComplete(t, s, fired, inputs, checked, differ)

	// The probe decision, whose rules read the input in every way.
	probe := Config{Policies: "testdata/evidence/policies", Schemas: "testdata/evidence/schemas"}
	var probeInputs []struct {
		Decision string          `json:"decision"`
		Input    json.RawMessage `json:"input"`
	}
	testfiles.ReadJSON(t, "testdata/evidence/inputs.json", &probeInputs)
	inputs = inputs[:0]
	for i, in := range probeInputs {
		inputs = append(inputs, corpus.Input{Decision: in.Decision, Name: fmt.Sprintf("inputs.json[%d]", i), Body: in.Input})
	}
	checked, differ = checkComplete(t, mustLoad(t, probe), topdownRules(t, probe.Policies), inputs, checked, differ)
	if checked < 1000 {
		t.Errorf("only %d rule evaluations checked", checked)
	}
	t.Logf("%d rule evaluations, %d differ", checked, differ)
}

func checkComplete(t *testing.T, s *Snapshot, fired firedOn, inputs []corpus.Input, checked, differ int) (int, int) {
	t.Helper()
	for _, in := range inputs {
		def := s.decisions[in.Decision]
		if def == nil {
			continue
		}
		doc, err := input.Decode(in.Body)
		if err != nil {
			t.Fatalf("%s: %v", in.Name, err)
		}
		for i, r := range def.rules {
			re := def.reads[i]
			if re.doc == nil {
				t.Fatalf("%s: reason rule %s at %s:%d was not analysed", in.Decision, r.Reason, r.File, r.Line)
			}
			whole := fired(t, re.doc, doc)
			cut := fired(t, re.doc, keepOnly(doc, re.reads))
			checked++
			if whole != cut {
				differ++
				if differ <= 10 {
					t.Errorf("%s %s: rule %s (%s:%d) fires %v on the input, %v on the input cut to its evidence paths %v",
						in.Decision, in.Name, r.Reason, r.File, r.Line, whole, cut, pointers(re.reads))
				}
			}
		}
	}
	return checked, differ
}

// TestEvidenceOfFixtures: for every fixture, the explanation gives each
// rule that fired evidence and each rule that did not fire (a condition
// that held) what it checked, never both, and each path resolves in the
// input to the value shown.
func TestEvidenceOfFixtures(t *testing.T) {
	s := mustLoad(t, repo)
	fixtures := repoFixtures(t)
	withEvidence, withChecked := 0, 0
	for _, fx := range fixtures {
		if fx.Input == nil || fx.WantError != nil {
			continue
		}
		d, err := s.Decide(context.Background(), fx.Decision, fx.Input, Options{Explain: true})
		if err != nil {
			t.Fatalf("%s/%s: %v", fx.Decision, fx.Name, err)
		}
		doc, _ := input.Decode(fx.Input)
		for _, ro := range d.Explanation {
			switch {
			case ro.Fired && len(ro.Checked) > 0, !ro.Fired && len(ro.Evidence) > 0:
				t.Errorf("%s/%s: rule %s (fired %v) has evidence %v and checked %v", fx.Decision, fx.Name, ro.Reason, ro.Fired, ro.Evidence, ro.Checked)
			case len(ro.Read()) == 0:
				t.Errorf("%s/%s: rule %s (fired %v) shows no value it read", fx.Decision, fx.Name, ro.Reason, ro.Fired)
			case ro.Fired:
				withEvidence++
			default:
				withChecked++
			}
			for _, ev := range ro.Read() {
				if ev.Data != "" {
					if ev.Path != "" || (ev.Value == nil && ev.Summary == "" && !ev.Absent) {
						t.Errorf("%s/%s: data evidence %+v", fx.Decision, fx.Name, ev)
					}
					continue
				}
				got, found := at(doc, ev.Path)
				switch {
				case ev.Absent:
					if found {
						t.Errorf("%s/%s: %s is said absent but holds %v", fx.Decision, fx.Name, ev.Path, got)
					}
				case !found:
					t.Errorf("%s/%s: %s does not resolve", fx.Decision, fx.Name, ev.Path)
				case ev.Value != nil:
					var b strings.Builder
					v, err := ast.InterfaceToValue(got)
					if err != nil {
						t.Fatal(err)
					}
					want := shown(ev.Path, v)
					fmt.Fprintf(&b, "%s", want.Value)
					if string(ev.Value) != b.String() {
						t.Errorf("%s/%s: %s shows %s, the input holds %s", fx.Decision, fx.Name, ev.Path, ev.Value, b.String())
					}
				case ev.Summary == "":
					t.Errorf("%s/%s: %s has neither value nor summary", fx.Decision, fx.Name, ev.Path)
				}
			}
		}
	}
	if withEvidence < 30 || withChecked < 30 {
		t.Errorf("only %d fired rules with evidence, %d held with what they checked", withEvidence, withChecked)
	}
}

// TestAllowedExplainsEveryRuleAsHeld: an allowed fixture's explanation
// lists every reason rule of its decision, as many as the decision's
// policy files have rule METADATA (counted here from the parsed files, not
// from the engine's list): those its expected result gives as reasons as
// fired, every other one as a condition that held, with what it checked.
// Which fixtures allow is their expected result read with the result
// schema's x-arbiter-allow.
func TestAllowedExplainsEveryRuleAsHeld(t *testing.T) {
	s := mustLoad(t, repo)
	fixtures := repoFixtures(t)
	held := map[string]int{}
	for _, fx := range fixtures {
		v, ok := s.Verdict(fx.Decision)
		if fx.Input == nil || fx.WantError != nil || !ok {
			continue
		}
		if yes, _ := v.Allows(fx.WantResult); !yes {
			continue
		}
		var want struct{ Reasons []string }
		if err := json.Unmarshal(fx.WantResult, &want); err != nil {
			t.Fatalf("%s/%s: %v", fx.Decision, fx.Name, err)
		}
		d, err := s.Decide(context.Background(), fx.Decision, fx.Input, Options{Explain: true})
		if err != nil {
			t.Fatalf("%s/%s: %v", fx.Decision, fx.Name, err)
		}
		rules := ruleAnnotations(t, filepath.Join(repo.Policies, "decisions", fx.Decision))
		if len(d.Explanation) != rules {
			t.Errorf("%s/%s: the explanation lists %d rules, the policy's METADATA annotates %d", fx.Decision, fx.Name, len(d.Explanation), rules)
		}
		n := 0
		for _, ro := range d.Explanation {
			if !ro.Fired && len(ro.Checked) > 0 {
				n++
			}
		}
		if n != rules-len(want.Reasons) {
			t.Errorf("%s/%s: %d rules held with what they checked, want %d (%d rules, reasons %v): %+v", fx.Decision, fx.Name, n, rules-len(want.Reasons), rules, want.Reasons, d.Explanation)
		}
		held[fx.Decision] += n
	}
	for _, name := range s.Names() {
		if v, _ := s.Verdict(name); v.Declared && held[name] == 0 {
			t.Errorf("decision %s: no allowed fixture explains a condition that held", name)
		}
	}
}

// ruleAnnotations counts the rule-scoped METADATA blocks of the Rego files
// in dir: each annotates one reason rule (helpers carry none, RULES.md).
func ruleAnnotations(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.rego"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Rego files in %s: %v", dir, err)
	}
	n := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ast.ParseModuleWithOpts(f, string(src), ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range m.Annotations {
			if a.Scope == "rule" {
				n++
			}
		}
	}
	return n
}

// at resolves a JSON pointer in doc.
func at(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func pointers(reads []inputRead) []string {
	out := make([]string, len(reads))
	for i, r := range reads {
		out[i] = r.pointer()
	}
	return out
}

// TestEvidenceGolden: the evidence the analysis finds in
// testdata/evidence, a decision written to use every way a rule can read
// the input (helpers with several bodies, else chains, functions in a
// library package, imports, aliases, references with variables, the
// reasons set read by a helper), on the inputs of its inputs.json, as
// testdata/golden/evidence.golden records it: each rule that fired with its
// evidence, each that held with what it checked. After an intended change:
// go test ./engine/ -run TestEvidenceGolden -update
func TestEvidenceGolden(t *testing.T) {
	dir := "testdata/evidence"
	cfg := Config{Policies: filepath.Join(dir, "policies"), Schemas: filepath.Join(dir, "schemas")}
	s := mustLoad(t, cfg)
	var inputs []struct {
		Decision string          `json:"decision"`
		Input    json.RawMessage `json:"input"`
	}
	testfiles.ReadJSON(t, filepath.Join(dir, "inputs.json"), &inputs)
	var out strings.Builder
	for _, name := range s.Names() {
		def := s.decisions[name]
		fmt.Fprintf(&out, "## decision %s: what each reason rule reads\n", name)
		for i, r := range def.rules {
			data, _ := json.Marshal(def.reads[i].data)
			fmt.Fprintf(&out, "%s %s (line %d): %s data %s\n", r.Rank, r.Reason, r.Line, strings.Join(readsWithVia(def.reads[i].reads), " "), data)
		}
		out.WriteString("\n")
	}
	for _, in := range inputs {
		d, err := s.Decide(context.Background(), in.Decision, in.Input, Options{Explain: true})
		if err != nil {
			t.Fatalf("%s: %v", in.Input, err)
		}
		fmt.Fprintf(&out, "### %s <<< %s\nresult %s\n", in.Decision, in.Input, d.Result)
		for _, ro := range d.Explanation {
			verb := "held"
			if ro.Fired {
				verb = "fired"
			}
			b, _ := json.Marshal(ro.Read())
			fmt.Fprintf(&out, "%s %s: %s\n", verb, ro.Reason, b)
		}
		out.WriteString("\n")
	}
	golden.Check(t, "testdata/golden/evidence.golden", []byte(out.String()))
}

func readsWithVia(reads []inputRead) []string {
	out := make([]string, len(reads))
	for i, r := range reads {
		out[i] = r.pointer()
		if r.via != "" {
			out[i] += "(via " + r.via + ")"
		}
	}
	return out
}
