package diff

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/shadow"
)

// analysis is the encoding of one decision in both revisions: the input
// model they share, what each decides of it, and the gaps.
type analysis struct {
	ctx      context.Context
	vs       *vals
	m        *model
	gapVars  map[string]*gap // free variables and functions that stand for gaps
	results  [2][]result
	axioms   []*smt.Term // facts about fresh terms (lengths of loops' collections)
	elements []*node     // elements of input arrays read at indices no loop binds
	errSites [2][]string
	depth    int // quantifiers around what is being encoded
	binders  []*smt.Term
	nalloc   int
	sch      [2]*schemaCtx
	exact    bool // the input schemas differ: validity is encoded exactly, per side
	enc      *encoding
	budget   time.Duration // the decision's time for its questions (Options.Budget)
}

type result struct {
	pc *smt.Term
	v  *slot
}

// sideOutcome is what one revision's plan makes of every input.
type sideOutcome struct {
	value *slot     // the decision's result
	err   *smt.Term // the plan fails (an error: topdown may still answer)
}

func (an *analysis) gapBool(g *gap) *smt.Term {
	v := an.vs.b.Fresh("gap", smt.Bool)
	an.gapVars[v.Name()] = g
	return v
}

// assumeValid is "element e, where it is there, satisfies side s's
// schema for it": true of every valid input, so it may be assumed
// wherever e is read.
func (an *analysis) assumeValid(e *node, s int) *smt.Term {
	b := an.vs.b
	x := an.m.x(e)
	out := []*smt.Term{b.Not(an.vs.is("vtok", x)), b.Not(an.vs.is("vset", x)), b.Implies(an.vs.is("varr", x), b.Cmp(">=", an.vs.field("va", smt.Int, x), b.IntLit(0)))}
	if schemas, ok := an.sch[s].follow(e.t.path(), true); ok {
		v := &validity{c: an.sch[s], an: an, side: s}
		for _, sc := range schemas {
			out = append(out, v.valid(sc, e, 0))
		}
	}
	return b.Implies(an.m.d(e), b.And(out...))
}

// run executes side s's plan of the decision.
func (an *analysis) run(s int, a engine.Analysis) (out sideOutcome, err error) {
	b := an.vs.b
	defer func() {
		if r := recover(); r != nil {
			if r == smt.ErrTooLarge {
				panic(r)
			}
			if e, ok := r.(error); ok && (errors.Is(e, context.Canceled) || errors.Is(e, context.DeadlineExceeded)) {
				panic(r)
			}
			err = fmt.Errorf("the plan has a shape the analysis does not read: %v", r)
		}
	}()
	if a.Plan == nil {
		return out, fmt.Errorf("the decision has no plan: %s", a.PlanError)
	}
	var plan *ir.Plan
	if a.Plan.Plans != nil {
		for _, p := range a.Plan.Plans.Plans {
			if p.Name == a.Entry {
				plan = p
			}
		}
	}
	if plan == nil {
		return out, fmt.Errorf("no plan named %s", a.Entry)
	}
	sd := &side{an: an, s: s, policy: a.Plan, funcs: map[string]*ir.Func{}, memo: map[string]*callResult{}, busy: map[string]bool{}, ctx: an.ctx}
	if a.Plan.Static != nil {
		sd.strs = mapped(a.Plan.Static.Strings, func(s *ir.StringConst) *ast.Term { return ast.StringTerm(s.Value) })
		sd.files = mapped(a.Plan.Static.Files, func(f *ir.StringConst) string { return f.Value })
	}
	if a.Plan.Funcs != nil {
		for _, f := range a.Plan.Funcs.Funcs {
			sd.funcs[f.Name] = f
		}
	}
	if a.Data != nil {
		sd.data = ast.NewTerm(a.Data)
	}
	f := &frame{sd: sd, fn: a.Entry}
	st := &state{pc: &pc{}}
	st = st.set(ir.Input, an.one(an.m.rootNode()))
	if sd.data != nil {
		st = st.set(ir.Data, an.one(conc{sd.data}))
	}
	f.blocks(plan.Blocks, st)
	var alts []alt
	for _, r := range an.results[s] {
		for _, ra := range r.v.alts {
			for _, m := range f.dot(ra.v, conc{ast.StringTerm("result")}, nil) {
				alts = append(alts, alt{g: b.And(r.pc, ra.g, m.g), v: m.v})
			}
		}
	}
	out.value = an.joinAlts(alts)
	out.err = b.Or(f.errs...)
	return out, nil
}

// question is one of the four questions: its formula and the class of
// shadow evaluation it is.
type question struct {
	class shadow.Class
	f     *smt.Term
}

// encoding is what the questions are made of, per side (0 old, 1 new).
type encoding struct {
	valid    [2]*smt.Term // the input satisfies the side's schema (true when both share one: background)
	err      [2]*smt.Term // the plan fails
	resultOK [2]*smt.Term // the plan's result is there and satisfies the side's result schema
	allowed  [2]*smt.Term // the result's outcome allows (by NEW's verdict, as shadow reads both)
	fAns     [2]*smt.Term // where the plan fails, whether topdown answers (a gap)
	fAllow   [2]*smt.Term // and allows (a gap)
	differ   *smt.Term    // the results' reasons or outcome differ
	fDiff    *smt.Term    // where a plan fails, whether they do (a gap)
	// background holds of every input: the schema (when shared), the
	// structure of JSON documents, facts about fresh terms.
	background []*smt.Term
}

// questions are the four questions' formulas.
func (e *encoding) questions(b *smt.Builder) []question {
	var ans, allow [2]*smt.Term
	for s := range 2 {
		ans[s] = b.And(e.valid[s], b.Ite(e.err[s], e.fAns[s], e.resultOK[s]))
		allow[s] = b.And(ans[s], b.Ite(e.err[s], e.fAllow[s], e.allowed[s]))
	}
	return []question{
		{shadow.RefuseToAllow, b.And(allow[1], b.Not(allow[0]))},
		{shadow.CandidateError, b.And(ans[0], b.Not(ans[1]))},
		{shadow.AllowToRefuse, b.And(ans[0], ans[1], allow[0], b.Not(allow[1]))},
		{shadow.ReasonsChanged, b.And(ans[0], ans[1], b.Eq(allow[0], allow[1]), b.Ite(b.Or(e.err[0], e.err[1]), e.fDiff, e.differ))},
	}
}

// encode runs both revisions' plans of a decision over one input model.
func encode(ctx context.Context, old, new engine.Analysis, vNew engine.Verdict, limit int) (*analysis, *encoding, error) {
	vs := newVals(limit)
	b := vs.b
	an := &analysis{ctx: ctx, vs: vs, gapVars: map[string]*gap{}}
	an.sch = [2]*schemaCtx{newSchemaCtx(old.InputSchema), newSchemaCtx(new.InputSchema)}
	an.exact = !reflect.DeepEqual(old.InputSchema, new.InputSchema)
	an.m = newModel(vs, an.sch[0], an.sch[1])
	var outs [2]sideOutcome
	for s, a := range []engine.Analysis{old, new} {
		var err error
		if outs[s], err = an.run(s, a); err != nil {
			return nil, nil, err
		}
	}
	e := &encoding{}
	// Validity of the input: assumed once when both sides share a schema,
	// else exactly, per side (an input one schema rejects is refused).
	// Each side's schema constrains every member either one names (a
	// member one schema adds is one the other refuses): encode until no
	// pass names a member the last did not.
	for n := -1; n != len(an.m.all); {
		n = len(an.m.all)
		for s := range 2 {
			v := &validity{c: an.sch[s], an: an, side: s, exact: an.exact, where: "input schema"}
			e.valid[s] = b.And(v.valid(an.sch[s].root, an.m.rootNode(), 0), an.elementsValid(s))
		}
	}
	if !an.exact {
		e.background = append(e.background, e.valid[0])
		e.valid = [2]*smt.Term{b.True(), b.True()}
	} else {
		// What both schemas require holds of every input a question is
		// about (each question needs one side's schema to hold): it is
		// assumed once, and only where they differ is each side's exact.
		// A quantified requirement both share is left out: assuming less
		// only admits more.
		var clauses [2][]*smt.Term
		count := map[int]int{}
		for s := range 2 {
			clauses[s] = smt.Clauses(b, e.valid[s])
			for _, c := range clauses[s] {
				count[c.ID()] |= 1 << s
			}
		}
		for s := range 2 {
			var own []*smt.Term
			for _, c := range clauses[s] {
				switch {
				case count[c.ID()] != 3:
					own = append(own, c)
				case s == 0 && !smt.Quantified(c):
					e.background = append(e.background, c)
				}
			}
			e.valid[s] = b.And(own...)
			trace("validity of side %d: %d clauses of its own, %d in all", s, len(own), len(clauses[s]))
		}
	}
	for s, a := range []engine.Analysis{old, new} {
		o := outs[s]
		rv := &validity{c: newSchemaCtx(a.ResultSchema), an: an, side: s, exact: true, where: "result schema"}
		e.resultOK[s] = b.And(an.def(o.value), rv.validSlot(a.ResultSchema, o.value, 0))
		e.err[s] = o.err
		e.allowed[s] = an.allowed(vNew, o.value, s)
		g := &gap{why: "the plan can fail here, where topdown, which the engine then asks, may answer", at: strings.Join(an.errSites[s], ", ")}
		e.fAns[s], e.fAllow[s] = an.gapBool(g), an.gapBool(g)
	}
	e.fDiff = an.gapBool(&gap{why: "the plan can fail, where topdown may answer", at: strings.Join(append(an.errSites[0], an.errSites[1]...), ", ")})
	e.differ = b.Or(b.Not(an.sameMember(outs[0].value, outs[1].value, "reasons")), b.Not(an.sameMember(outs[0].value, outs[1].value, vNew.OutcomeKey)))
	e.background = append(e.background, an.m.structure()...)
	e.background = append(e.background, an.axioms...)
	return an, e, nil
}

// elementsValid assumes, for side s, the items schema of the elements read
// at indices no loop binds.
func (an *analysis) elementsValid(s int) *smt.Term {
	return an.vs.b.And(mapped(an.elements, func(e *node) *smt.Term { return an.assumeValid(e, s) })...)
}

// allowed is "the result's outcome member is one the verdict allows".
func (an *analysis) allowed(v engine.Verdict, value *slot, s int) *smt.Term {
	b := an.vs.b
	if !v.Declared {
		return b.False()
	}
	var out []*smt.Term
	for _, a := range value.alts {
		m := (&validity{an: an, side: s}).member(a.v, v.OutcomeKey)
		for _, ma := range m.alts {
			for _, allowed := range v.Allow {
				t, err := ast.InterfaceToValue(allowed)
				if err != nil {
					continue
				}
				out = append(out, b.And(a.g, ma.g, an.eqVals(ma.v, conc{ast.NewTerm(t)}, s, "")))
			}
		}
	}
	return b.Or(out...)
}

// sameMember is "both results hold the same value at key, or neither".
func (an *analysis) sameMember(x, y *slot, key string) *smt.Term {
	b := an.vs.b
	member := func(sl *slot, s int) *slot {
		var alts []alt
		for _, a := range sl.alts {
			alts = append(alts, guardAlts(b, a.g, (&validity{an: an, side: s}).member(a.v, key).alts)...)
		}
		return &slot{alts: alts}
	}
	mx, my := member(x, 0), member(y, 1)
	dx, dy := an.def(mx), an.def(my)
	return b.Or(b.And(b.Not(dx), b.Not(dy)), an.eqSlots(mx, my, 1, ""))
}

// gapsIn lists the gaps whose variables or functions occur in ts.
func (an *analysis) gapsIn(ts ...*smt.Term) []string {
	seen := map[int]bool{}
	found := map[string]bool{}
	var stack []*smt.Term
	stack = append(stack, ts...)
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[t.ID()] {
			continue
		}
		seen[t.ID()] = true
		for _, name := range []string{t.Name(), t.Op()} {
			if g, ok := an.gapVars[name]; ok && name != "" {
				found[g.String()] = true
			}
		}
		stack = append(stack, t.Args()...)
	}
	return slices.Sorted(maps.Keys(found))
}
