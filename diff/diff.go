// Package diff proves that a policy edit changes no decision in a given
// direction, or finds an input that it changes: the semantic diff of two
// revisions (`arbiter diff OLD NEW`).
//
// For each decision it asks three questions about the inputs both input
// schemas admit: is there one that OLD refuses and NEW allows
// (refuse_to_allow), one that OLD allows and NEW refuses
// (allow_to_refuse), one whose allowance stays and whose reasons or
// outcome change (reasons_changed)? The revisions' Rego runs symbolically
// (interp.go) over a finite domain of candidate values per input field
// (domain.go); each question is a formula that a SAT solver answers
// (formula.go). The solver only proposes: every example is decided by
// both revisions on both evaluators (the compiled program and topdown) and
// classified as shadow evaluation classifies live traffic before it is
// reported. A verdict none is an Unsat answer over a model without gaps,
// within the domain's bounds; anything the evaluator does not model makes
// it unknown, with the reason.
package diff

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/shadow"
)

// The verdicts.
const (
	None    = "none"
	Found   = "found"
	Unknown = "unknown"
)

// Questions are the three questions, in report order.
var Questions = []shadow.Class{shadow.RefuseToAllow, shadow.AllowToRefuse, shadow.ReasonsChanged}

// Answer is the verdict on one question.
type Answer struct {
	Verdict string `json:"verdict"`
	// Example (found) is the input, and Fields the JSON pointers at which
	// it differs from the fixture input it started from.
	Example json.RawMessage `json:"example,omitempty"`
	Fields  []string        `json:"fields,omitempty"`
	Old     *Outcome        `json:"old,omitempty"`
	New     *Outcome        `json:"new,omitempty"`
	// Bounds (none) says what the proof covers.
	Bounds string `json:"bounds,omitempty"`
	// Reason (unknown) says why there is no proof.
	Reason string `json:"reason,omitempty"`
}

// Outcome is what one revision decides of an example.
type Outcome struct {
	Result json.RawMessage      `json:"result,omitempty"`
	Error  *engine.Error        `json:"error,omitempty"`
	Fired  []engine.RuleOutcome `json:"fired,omitempty"`
}

// DecisionDiff answers the three questions for one decision.
type DecisionDiff struct {
	RefuseToAllow  *Answer `json:"refuse_to_allow"`
	AllowToRefuse  *Answer `json:"allow_to_refuse"`
	ReasonsChanged *Answer `json:"reasons_changed"`
}

// Get returns the answer to question q.
func (d *DecisionDiff) Get(q shadow.Class) *Answer {
	switch q {
	case shadow.RefuseToAllow:
		return d.RefuseToAllow
	case shadow.AllowToRefuse:
		return d.AllowToRefuse
	}
	return d.ReasonsChanged
}

func (d *DecisionDiff) set(q shadow.Class, a *Answer) {
	switch q {
	case shadow.RefuseToAllow:
		d.RefuseToAllow = a
	case shadow.AllowToRefuse:
		d.AllowToRefuse = a
	default:
		d.ReasonsChanged = a
	}
}

// Report is the diff of two revisions.
type Report struct {
	Decisions map[string]*DecisionDiff `json:"decisions"`
}

// Names lists the decisions in order.
func (r *Report) Names() []string {
	var out []string
	for n := range r.Decisions {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// maxProposals bounds the examples the solver proposes per question that
// do not confirm before the answer is unknown.
const maxProposals = 16

// Run diffs every decision of old and new. fixtures are the inputs each
// example starts from (the fixtures of a test folder).
func Run(ctx context.Context, old, new *engine.Snapshot, fixtures []engine.Fixture) (*Report, error) {
	rep := &Report{Decisions: map[string]*DecisionDiff{}}
	names := map[string]bool{}
	for _, n := range append(old.Names(), new.Names()...) {
		names[n] = true
	}
	for name := range names {
		dd, err := decision(ctx, old, new, name, fixtures)
		if err == nil {
			err = ctx.Err() // cancelled or past its deadline: what it built is incomplete
		}
		if err != nil {
			return nil, fmt.Errorf("decision %s: %w", name, err)
		}
		rep.Decisions[name] = dd
	}
	return rep, nil
}

func unknownAll(reason string) *DecisionDiff {
	return &DecisionDiff{&Answer{Verdict: Unknown, Reason: reason}, &Answer{Verdict: Unknown, Reason: reason}, &Answer{Verdict: Unknown, Reason: reason}}
}

func decision(ctx context.Context, old, new *engine.Snapshot, name string, fixtures []engine.Fixture) (*DecisionDiff, error) {
	ao, ok1 := old.Analysis(name)
	an, ok2 := new.Analysis(name)
	if !ok1 || !ok2 {
		return unknownAll("the decision exists in one revision only"), nil
	}
	vOld, _ := old.Verdict(name)
	vNew, _ := new.Verdict(name)
	var inputs [][]byte
	for _, f := range fixtures {
		if f.Decision == name && f.Input != nil && f.WantError == nil {
			inputs = append(inputs, f.Input)
		}
	}
	// When the input schemas differ, a field no policy reads may still be
	// accepted by one and refused by the other: every field the schemas
	// name joins the domain.
	var extra [][]string
	so, sn := inputSchema(old, name), inputSchema(new, name)
	if !reflect.DeepEqual(so, sn) {
		extra = append(schemaPaths(so), schemaPaths(sn)...)
	}
	b := newBuilder()
	dom, err := newDomain(b, ast.MustParseRef("data.decisions."+name), []*ast.Compiler{ao.Compiler, an.Compiler}, []ast.Value{ao.Data, an.Data}, extra, inputs,
		func(doc []byte) bool { return ao.Valid(doc) || an.Valid(doc) })
	if err != nil {
		return unknownAll(err.Error()), nil
	}
	gaps := map[string]bool{}
	ref := ast.MustParseRef("data.decisions." + name + ".decision")
	sides := make([]struct {
		alts  []alt
		valid F
		v     engine.Verdict
	}, 2)
	for i, a := range []engine.Analysis{ao, an} {
		in := &interp{ctx: ctx, c: a.Compiler, data: a.Data, b: b, dom: dom, memo: map[string][]alt{}, gaps: gaps}
		sides[i].alts = in.rule(ref, nil)
		sides[i].valid = dom.validity(b, a.Valid)
	}
	sides[0].v, sides[1].v = vOld, vNew
	allow := func(i int) F {
		v := sides[i].v
		if !v.Declared {
			return False
		}
		g := False
		for _, m := range member(sides[i].alts, v.OutcomeKey, b) {
			if m.v.t == nil {
				gaps[fmt.Sprintf("the %s member is not a concrete value", v.OutcomeKey)] = true
				continue
			}
			for _, a := range v.Allow {
				if t, err := ast.InterfaceToValue(a); err == nil && m.v.t.Value.Compare(t) == 0 {
					g = b.or(g, m.g)
				}
			}
		}
		return b.and(sides[i].valid, g)
	}
	aOld, aNew := allow(0), allow(1)
	same := b.and(b.and(sides[0].valid, sides[1].valid), b.not(b.and(aOld, b.not(aNew))))
	same = b.and(same, b.not(b.and(aNew, b.not(aOld))))
	changed := b.or(b.not(equalMembers(b, sides[0].alts, sides[1].alts, "reasons", gaps)),
		b.not(equalMembers(b, sides[0].alts, sides[1].alts, vNew.OutcomeKey, gaps)))
	formulas := map[shadow.Class]F{
		shadow.RefuseToAllow:  b.and(b.not(aOld), aNew),
		shadow.AllowToRefuse:  b.and(aOld, b.not(aNew)),
		shadow.ReasonsChanged: b.and(same, changed),
	}
	base := dom.constraints(b)
	dd := &DecisionDiff{}
	for _, q := range Questions {
		dd.set(q, answer(ctx, old, new, name, q, b, dom, base, formulas[q], gaps))
	}
	return dd, nil
}

func answer(ctx context.Context, old, new *engine.Snapshot, name string, q shadow.Class, b *builder, dom *domain, base []F, f F, gaps map[string]bool) *Answer {
	all := append(append([]F(nil), base...), f)
	unconfirmed := 0
	for unconfirmed < maxProposals && ctx.Err() == nil {
		model := b.solve(all)
		if model == nil {
			break
		}
		doc := dom.assemble(b, model)
		if c := confirm(ctx, old, new, name, doc); c.class == q && c.agree {
			return found(ctx, old, new, name, q, dom, doc)
		}
		unconfirmed++
		all = append(all, b.not(dom.chosen(b, model)))
	}
	switch {
	case len(gaps) > 0:
		var gs []string
		for g := range gaps {
			gs = append(gs, g)
		}
		sort.Strings(gs)
		return &Answer{Verdict: Unknown, Reason: "not modelled: " + joinShort(gs)}
	case unconfirmed >= maxProposals:
		return &Answer{Verdict: Unknown, Reason: fmt.Sprintf("the analysis proposed %d examples that deciding did not confirm", unconfirmed)}
	case unconfirmed > 0:
		return &Answer{Verdict: Unknown, Reason: fmt.Sprintf("the analysis proposed %d examples that deciding did not confirm, and then none", unconfirmed)}
	}
	return &Answer{Verdict: None, Bounds: dom.Bounds()}
}

func inputSchema(s *engine.Snapshot, name string) any {
	for _, d := range s.Decisions() {
		if d.Name == name {
			return d.InputSchema
		}
	}
	return nil
}

func joinShort(gs []string) string {
	s := ""
	for i, g := range gs {
		if i == 5 {
			return s + fmt.Sprintf("; and %d more", len(gs)-5)
		}
		if i > 0 {
			s += "; "
		}
		s += g
	}
	return s
}

// member returns the alternatives of member key of a decision's result.
func member(alts []alt, key string, b *builder) []alt {
	var out []alt
	for _, a := range alts {
		switch {
		case a.v.obj != nil:
			for i, k := range a.v.obj.keys {
				if k.Value.Compare(ast.String(key)) == 0 {
					for _, m := range a.v.obj.vals[i] {
						out = append(out, alt{g: b.and(a.g, m.g), v: m.v})
					}
				}
			}
		case a.v.t != nil:
			if obj, ok := a.v.t.Value.(ast.Object); ok {
				if m := obj.Get(ast.StringTerm(key)); m != nil {
					out = append(out, alt{g: a.g, v: val{t: m}})
				}
			}
		}
	}
	// One alternative per value: the result's other members split it.
	var merged []alt
	for _, a := range merge(b, out) {
		if a.v.coll != nil {
			if i := slices.IndexFunc(merged, func(m alt) bool { return m.v.coll == a.v.coll }); i >= 0 {
				merged[i].g = b.or(merged[i].g, a.g)
				continue
			}
		}
		merged = append(merged, a)
	}
	return merged
}

// equalMembers is the formula "both results hold the same value at key"
// (or neither holds one).
func equalMembers(b *builder, x, y []alt, key string, gaps map[string]bool) F {
	mx, my := member(x, key, b), member(y, key, b)
	hx, hy := False, False
	for _, a := range mx {
		hx = b.or(hx, a.g)
	}
	for _, a := range my {
		hy = b.or(hy, a.g)
	}
	eq := b.and(b.not(hx), b.not(hy))
	for _, a := range mx {
		for _, c := range my {
			eq = b.or(eq, b.and(b.and(a.g, c.g), equalVal(b, a.v, c.v, gaps)))
		}
	}
	return eq
}

// equalVal compares two values, concrete arrays and guarded collections
// position by position.
func equalVal(b *builder, x, y val, gaps map[string]bool) F {
	if x.t != nil && y.t != nil {
		if x.t.Equal(y.t) {
			return True
		}
		return False
	}
	ex, okx := elems(x)
	ey, oky := elems(y)
	if !okx || !oky {
		gaps["comparing results whose members are not concrete"] = true
		return False
	}
	cx, cy := prefixCounts(b, ex), prefixCounts(b, ey)
	// same[j]: both hold the same element at position j.
	n := max(len(ex), len(ey))
	same := make([]F, n)
	for j := range same {
		same[j] = False
		for ix, a := range ex {
			for iy, c := range ey {
				if a.t.Equal(c.t) {
					same[j] = b.or(same[j], b.and(b.and(a.g, at(cx, ix, j)), b.and(c.g, at(cy, iy, j))))
				}
			}
		}
	}
	eq := False
	prefix := True
	for k := 0; k <= n; k++ {
		eq = b.or(eq, b.and(prefix, b.and(at(cx, len(ex), k), at(cy, len(ey), k))))
		if k < n {
			prefix = b.and(prefix, same[k])
		}
	}
	return eq
}

func elems(v val) ([]gelem, bool) {
	if v.coll != nil && !v.coll.set {
		return v.coll.elems, true
	}
	if v.t != nil {
		if arr, ok := v.t.Value.(*ast.Array); ok {
			out := make([]gelem, arr.Len())
			for i := range out {
				out[i] = gelem{g: True, t: arr.Elem(i)}
			}
			return out, true
		}
	}
	return nil, false
}
