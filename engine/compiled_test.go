package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/engine/ireval"
	"github.com/arbiter-dev/arbiter/internal/race"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// The differential tests of the compiled evaluator (engine/ireval) against
// topdown, the authority: every fixture of the repository and of
// engine/testdata, the benchmark corpus, and FuzzCompiledAgrees over
// generated inputs. A compiled answer must equal topdown's exactly (same
// value, same spelling); a compiled evaluation may end without an answer
// only where the engine then asks topdown.

// differential decides input both ways. It fails t when the compiled
// program answers anything but what topdown answers, and reports whether
// the compiled program answered.
func differential(t testing.TB, s *Snapshot, def *decisionDef, input ast.Value, what string) bool {
	t.Helper()
	prog := def.compiled.program()
	if prog == nil {
		t.Fatalf("%s: decision %s does not run compiled: %s", what, def.name, def.compiled.info(def.name).Reason)
	}
	ctx := context.Background()
	want, werr := s.eval(ctx, def, input)
	got, gerr := prog.Eval(ctx, input, ireval.EvalOptions{Deadline: time.Now().Add(time.Minute)})
	switch {
	case gerr != nil && ireval.IsCancelled(gerr):
		t.Fatalf("%s: compiled evaluation cancelled: %v", what, gerr)
	case gerr != nil:
		return false // the engine asks topdown
	case werr != nil:
		t.Fatalf("%s: compiled answered %s where topdown failed: %v", what, valueString(got), werr)
	case !sameValue(got, want):
		t.Fatalf("%s: compiled %s, topdown %s", what, valueString(got), valueString(want))
	}
	return true
}

// snapshots are the policy sets the differential tests run: the
// repository's, and engine/testdata's (a decision Go knows nothing of).
func snapshots(t testing.TB) map[string]struct {
	snap     *Snapshot
	fixtures string
} {
	return map[string]struct {
		snap     *Snapshot
		fixtures string
	}{
		"repository": {mustLoad(t, patient(repo)), repoTests},
		"quota":      {mustLoad(t, patient(quotaConfig(quota))), filepath.Join(quota, "tests")},
	}
}

var patientSnap = sync.OnceValues(func() (*Snapshot, error) { return Load(context.Background(), patient(repo)) })

// patientSnapshot is the repository's Snapshot with a patient deadline,
// loaded once per process (each fuzz worker is one).
func patientSnapshot(tb testing.TB) *Snapshot {
	tb.Helper()
	s, err := patientSnap()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// patient gives evaluations a deadline no loaded test machine reaches: the
// differential tests compare answers, and a topdown evaluation cut off by a
// busy machine running the race detector is no answer.
func patient(cfg Config) Config {
	cfg.EvalTimeout = 5 * time.Minute
	return cfg
}

// TestEveryDecisionRunsCompiled: the decisions of the repository and of
// engine/testdata, and the runaway policies of the sandbox tests, all run
// compiled; /v1/status and `arbiter check` report it.
func TestEveryDecisionRunsCompiled(t *testing.T) {
	for name, set := range snapshots(t) {
		for _, ci := range set.snap.Compiled() {
			if !ci.Compiled {
				t.Errorf("%s: decision %s runs on topdown: %s", name, ci.Decision, ci.Reason)
			}
		}
	}
	for _, b := range bombs {
		s := mustLoad(t, bomb(t, b.expr, time.Second))
		for _, ci := range s.Compiled() {
			if !ci.Compiled {
				t.Errorf("runaway policy %q runs on topdown: %s", b.name, ci.Reason)
			}
		}
	}
}

// TestCompiledAgreesOnFixtures decides every fixture input (as the
// engine's parser builds it) both ways. Every valid fixture must be
// answered by the compiled program itself.
func TestCompiledAgreesOnFixtures(t *testing.T) {
	race.Skip(t)
	for name, set := range snapshots(t) {
		fixtures, err := LoadFixtures(set.fixtures)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, fx := range fixtures {
			def := set.snap.decisions[fx.Decision]
			in, err := wholeInput(def, fx.RequestBody())
			if err != nil {
				continue // rejected before evaluation
			}
			what := name + "/" + fx.Decision + "/" + fx.Name
			if !differential(t, set.snap, def, in, what) && fx.WantResult != nil {
				t.Errorf("%s: the compiled program did not answer a fixture topdown answers", what)
			}
			n++
		}
		if n == 0 {
			t.Errorf("%s: no fixture evaluated", name)
		}
		t.Logf("%s: %d fixtures agree", name, n)
	}
}

// TestCompiledAgreesOnCorpus decides the benchmark corpus both ways.
func TestCompiledAgreesOnCorpus(t *testing.T) {
	race.Skip(t)
	s := mustLoad(t, patient(repo))
	inputs := mustCorpus(t, s)
	for _, in := range inputs {
		def := s.decisions[in.Decision]
		v, err := wholeInput(def, in.Body)
		if err != nil {
			t.Fatalf("%s: %v", in.Name, err)
		}
		if !differential(t, s, def, v, in.Name) {
			t.Errorf("%s: the compiled program did not answer", in.Name)
		}
	}
	t.Logf("%d corpus inputs agree", len(inputs))
}

// numberForms rewrites every number of a JSON document into other forms
// of the same value (1000 -> 1000.0, 1e3, 1.000E+3) and into the u64 edge.
func numberForms(doc any) []any {
	forms := []func(json.Number) json.Number{
		func(n json.Number) json.Number {
			if strings.ContainsAny(string(n), ".eE") {
				return n
			}
			return n + ".0"
		},
		func(n json.Number) json.Number {
			if strings.ContainsAny(string(n), ".eE") || strings.HasPrefix(string(n), "-") {
				return n
			}
			return n + "e0"
		},
		func(n json.Number) json.Number {
			s := string(n)
			if strings.ContainsAny(s, ".eE") || strings.HasPrefix(s, "-") || len(s) < 2 {
				return n
			}
			return json.Number(s[:1] + "." + s[1:] + "E+" + itoa(len(s)-1))
		},
		func(json.Number) json.Number { return "18446744073709551615" },
		func(json.Number) json.Number { return "18446744073709551616" },
		func(json.Number) json.Number { return "1.8446744073709551615e19" },
		func(json.Number) json.Number { return "-1" },
	}
	var out []any
	for _, f := range forms {
		out = append(out, mapNumbers(doc, f))
	}
	return out
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func mapNumbers(doc any, f func(json.Number) json.Number) any {
	switch v := doc.(type) {
	case json.Number:
		return f(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = mapNumbers(x, f)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = mapNumbers(x, f)
		}
		return out
	}
	return doc
}

func useNumber(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	err := dec.Decode(&doc)
	return doc, err
}

// fuzzSeeds are the fixture bodies, their number forms, and a few shapes.
func fuzzSeeds(tb testing.TB) [][]byte {
	var out [][]byte
	for i, s := range fixtureSeeds(tb) {
		out = append(out, s.body)
		doc, err := useNumber(s.body)
		if err != nil || i%4 != 0 {
			// Number forms of a quarter of the fixtures: enough shapes,
			// and a baseline the short CI fuzz run can afford.
			continue
		}
		for _, d := range numberForms(doc) {
			b, _ := json.Marshal(d)
			out = append(out, b)
		}
	}
	return append(out, []byte(`{}`), []byte(`[]`), []byte(`null`), []byte(`"x"`), []byte(`{"runnerState":{"outbox":7}}`))
}

// FuzzCompiledAgrees decides generated inputs with both evaluators, every
// decision of the repository: any JSON the strict decoder accepts, valid
// for the schema or not (the evaluators must agree on every value, not
// only on those the schema lets through).
func FuzzCompiledAgrees(f *testing.F) {
	race.Skip(f)
	s := patientSnapshot(f)
	names := s.Names()
	for i, b := range testfiles.FuzzSeeds(f, fuzzSeeds(f), 64) {
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		doc, err := input.Decode(body)
		if err != nil {
			return
		}
		v, err := input.Value(doc)
		if err != nil {
			return
		}
		def := s.decisions[names[int(sel)%len(names)]]
		differential(t, s, def, v, string(body))
	})
}

// TestCompiledErrorDefersToTopdown: where the compiled evaluation errs and
// topdown answers (topdown's early exit skips a failing body of a rule
// with a constant value, the plan evaluates it), Decide answers what
// topdown answers.
func TestCompiledErrorDefersToTopdown(t *testing.T) {
	root := copyTree(t, quota)
	editFile(t, filepath.Join(root, quotaPolicy), "reasons := [",
		"exhausted if input.used >= data.decisions.quota_check.limit\n\nexhausted if to_number(\"not a number\") > 0\n\n"+
			"failures contains [1, \"quota_exhausted\"] if exhausted\n\nreasons := [")
	s := mustLoad(t, quotaConfig(root))
	def := s.decisions["quota_check"]
	if def.compiled.program() == nil {
		t.Fatalf("not compiled: %s", def.compiled.reason)
	}
	input := ast.MustParseTerm(`{"tenant": "t", "used": 20}`).Value
	if _, err := def.compiled.prog.Eval(context.Background(), input, ireval.EvalOptions{}); err == nil {
		t.Fatal("the compiled program answered; this test needs one that errs where topdown answers")
	}
	d, err := s.Decide(context.Background(), "quota_check", []byte(`{"tenant": "t", "used": 20}`), Options{})
	if err != nil {
		t.Fatalf("Decide: %v, want topdown's answer", err)
	}
	want := `{"allow":false,"reasons":["quota_exhausted"]}`
	if !SameJSON(d.Result, []byte(want)) {
		t.Fatalf("Decide: %s, want %s", d.Result, want)
	}
}

// TestCompiledTimeoutIsPolicyTimeout: the compiled path reports its
// deadline with topdown's error code and message.
func TestCompiledTimeoutIsPolicyTimeout(t *testing.T) {
	s := mustLoad(t, bomb(t, bombs[0].expr, 50*time.Millisecond))
	if s.decisions["quota_check"].compiled.program() == nil {
		t.Fatal("the runaway policy does not run compiled")
	}
	_, err := s.Decide(context.Background(), "quota_check", []byte(`{"tenant":"bomb","used":1}`), Options{})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodePolicyTimeout || e.Message != "policy evaluation exceeded 50ms" {
		t.Fatalf("runaway: %v, want policy_timeout", err)
	}
}

// TestSelfCheckTurnsOffADisagreeingDecision forces a disagreement (the
// compiled result is tampered with, as a compiler bug would) and watches
// the self-check's Recheck report both answers and switch the decision to
// topdown. (Package shadow samples, queues and counts the rechecks.)
func TestSelfCheckTurnsOffADisagreeingDecision(t *testing.T) {
	cfg := quotaConfig(quota)
	s := mustLoad(t, cfg)
	var rechecks []Recheck
	s.selfCheck = func(c Recheck) { rechecks = append(rechecks, c) }
	def := s.decisions["quota_check"]
	def.compiled.tamper = func(ast.Value) ast.Value {
		return ast.MustParseTerm(`{"allow": true, "reasons": []}`).Value
	}
	if def.inputProjection() == nil {
		t.Fatal("a compiled decision builds its whole input")
	}
	body := []byte(`{"tenant": "t", "used": 20}`)
	d, err := s.Decide(context.Background(), "quota_check", body, Options{})
	if err != nil || !SameJSON(d.Result, []byte(`{"allow":true,"reasons":[]}`)) {
		t.Fatalf("tampered answer: %v %v", d, err)
	}
	if len(rechecks) != 1 {
		t.Fatalf("%d compiled answers handed to the self-check, want 1", len(rechecks))
	}
	dis, concluded := rechecks[0].Run(context.Background())
	if !concluded || dis == nil || dis.Decision != "quota_check" || dis.Compiled != `{"allow":true,"reasons":[]}` ||
		dis.Topdown != `{"allow":false,"reasons":["quota_exhausted"]}` || !SameJSON(dis.Input, body) {
		t.Fatalf("disagreement: %+v", dis)
	}
	if ci := s.Compiled()[0]; ci.Compiled || !strings.Contains(ci.Reason, "self-check") {
		t.Errorf("after the disagreement: %+v", ci)
	}
	if p := def.inputProjection(); p != nil {
		t.Errorf("after the disagreement the input path still projects: %+v", p)
	}
	d, err = s.Decide(context.Background(), "quota_check", body, Options{})
	if err != nil || !SameJSON(d.Result, []byte(`{"allow":false,"reasons":["quota_exhausted"]}`)) {
		t.Fatalf("after the disagreement the decision must run on topdown: %v %v", d, err)
	}
	if len(rechecks) != 1 {
		t.Errorf("a topdown answer was handed to the self-check")
	}
	// A reload compiles afresh.
	if s2 := mustLoad(t, cfg); !s2.Compiled()[0].Compiled {
		t.Errorf("the next snapshot does not run compiled: %+v", s2.Compiled()[0])
	}
}

// TestSelfCheckAgreementCountsNothing: untampered compiled answers pass the
// self-check.
func TestSelfCheckAgreementCountsNothing(t *testing.T) {
	s := mustLoad(t, repo)
	var rechecks []Recheck
	s.selfCheck = func(c Recheck) { rechecks = append(rechecks, c) }
	fixtures := repoFixtures(t)
	decided := 0
	for _, fx := range fixtures {
		if fx.WantResult == nil {
			continue
		}
		if _, err := s.Decide(context.Background(), fx.Decision, fx.RequestBody(), Options{}); err != nil {
			t.Fatalf("%s: %v", fx.Name, err)
		}
		decided++
	}
	if len(rechecks) == 0 || len(rechecks) > decided {
		t.Fatalf("%d compiled answers of %d decisions", len(rechecks), decided)
	}
	for _, c := range rechecks {
		if d, concluded := c.Run(context.Background()); d != nil || !concluded {
			t.Errorf("disagreement: %+v (concluded %t)", d, concluded)
		}
	}
	for _, ci := range s.Compiled() {
		if !ci.Compiled {
			t.Errorf("%+v", ci)
		}
	}
}

// wholeInput builds the whole input of body the way Decide does when
// nothing is projected.
func wholeInput(def *decisionDef, body []byte) (ast.Value, error) {
	in, err := input.Parse(context.Background(), body, def.input, input.Options{})
	if err != nil {
		return nil, err
	}
	return in.Value, nil
}
