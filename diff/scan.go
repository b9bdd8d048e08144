package diff

import (
	"fmt"
	"slices"

	"github.com/open-policy-agent/opa/v1/ir"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// A loop (ScanStmt) over a collection the policy built, or over a
// constant, runs its body once per member, each under the member's
// guard. A loop over an array of the input, whose length is the solver's
// to choose, runs its body once on a bound index i: its effects on the
// locals outside it are lifted with quantifiers. A value set where some
// iteration ran is set where "exists i" ran; a member added to a
// collection becomes a quantified member (qelem), there for each i where
// it was added. Other effects that differ per iteration are gaps.

// qelem is a member of a collection present for every assignment of its
// bound variables where cond holds.
type qelem struct {
	vars []*smt.Term
	cond *smt.Term
	key  val // objects
	v    val
}

func (q *qelem) guarded(b *smt.Builder, g *smt.Term) *qelem {
	return &qelem{vars: q.vars, cond: b.And(g, q.cond), key: q.key, v: q.v}
}

// boundFor is the variable a quantifier over the elements of array
// template t binds: named by the template and the quantifiers around it,
// so that the same quantifier in both revisions is the same term.
func (an *analysis) boundFor(prefix string, t *tmpl) *smt.Term {
	return an.vs.b.Bound(fmt.Sprintf("%s!%d!%d", prefix, t.id, an.depth), smt.Int)
}

// qmember is "x is a member of q".
func (an *analysis) qmember(q *qelem, x val, s int, at string) *smt.Term {
	b := an.vs.b
	return b.Exists(q.vars, b.And(q.cond, an.eqVals(q.v, x, s, at)))
}

// qcount is the length of a collection with quantified members: a fresh
// integer, constrained by what is true of it (zero exactly when nothing is
// present, at least the plain members for an array).
func (an *analysis) qcount(c *coll, plain *smt.Term) *smt.Term {
	b := an.vs.b
	n := b.Fresh("count", smt.Int)
	var some []*smt.Term
	for _, e := range c.elems {
		some = append(some, e.g)
	}
	for _, q := range c.q {
		some = append(some, b.Exists(q.vars, q.cond))
	}
	any := b.Or(some...)
	an.axioms = append(an.axioms, b.Eq(b.Cmp(">", n, b.IntLit(0)), any), b.Cmp(">=", n, b.IntLit(0)))
	if c.kind == kArray {
		an.axioms = append(an.axioms, b.Cmp(">=", n, plain))
	}
	return n
}

// elementRead notes an element of an input array that a revision reads at
// an index no loop binds: its items schema is assumed there (validity.go).
func (an *analysis) elementRead(e *node) {
	if !slices.ContainsFunc(e.idx, func(i *smt.Term) bool { return i.Sort() == smt.Int && i.IsBoundTerm() }) {
		an.elements = append(an.elements, e)
	}
}

// elemExists is "some element e of array node n has p(e)", each element
// assumed valid against side s's items schema.
func (an *analysis) elemExists(n *node, s int, p func(e *node) *smt.Term) *smt.Term {
	b := an.vs.b
	i := an.boundFor("m", an.m.element(n.t))
	e := an.m.at(n, i)
	e.touch()
	return b.Exists([]*smt.Term{i}, b.And(an.m.d(e), an.assumeValid(e, s), p(e)))
}

// scan runs a ScanStmt.
func (f *frame) scan(s *ir.ScanStmt, st *state) (*state, flow) {
	an, b := f.sd.an, f.b()
	src := st.get(s.Source)
	var outs []*state
	var fl flow
	// Where the source is undefined, the loop does nothing.
	outs = append(outs, st.with(st.pc.and(b, b.Not(an.def(src)))))
	for _, a := range src.alts {
		cur := st.with(st.pc.and(b, a.g))
		if cur.pc.dead() {
			continue
		}
		v := a.v
		if c, ok := v.(conc); ok {
			if cc, ok := an.vs.concColl(c.t); ok {
				v = cc
			} else {
				outs = append(outs, cur) // a scalar: no members
				continue
			}
		}
		switch x := v.(type) {
		case *coll:
			var keys []val
			switch x.kind {
			case kArray:
				keys = mapped(positions(b, x), func(p *smt.Term) val { return sym{t: an.vs.numV(b.App("to_real", smt.Real, p)), m: mNum} })
			case kSet:
				keys = mapped(x.elems, func(e *elem) val { return e.v })
			default:
				keys = mapped(x.elems, func(e *elem) val { return e.key })
			}
			for j, e := range x.elems {
				if e.g.IsFalse() {
					continue
				}
				prev := cur.pc
				in := cur.with(cur.pc.and(b, e.g)).set(s.Key, an.one(keys[j])).set(s.Value, an.one(e.v))
				body := f.block(s.Block, in)
				fl.ret = append(fl.ret, body.ret...)
				skip := cur.with(cur.pc.and(b, b.Not(e.g)))
				cur = f.merge(append(append([]*state{skip}, body.exits[-1]...), body.exits[0]...), true).withPC(prev)
				if cur == nil {
					break
				}
			}
			for _, q := range x.q {
				if cur == nil {
					break
				}
				key := q.v
				if x.kind == kObject {
					key = q.key
				} else if x.kind == kArray {
					key = an.opaqueOf(&gap{why: "the index of a member added by a loop over the input", at: f.loc(s)})
				}
				cur = f.qscan(s, cur, q.vars, q.cond, key, q.v)
			}
			if cur != nil {
				outs = append(outs, cur)
			}
		case *node:
			x.touch()
			xt := an.m.x(x)
			m := x.t.mask[f.sd.s]
			if m.has(mObj) {
				g := &gap{why: fmt.Sprintf("a loop over the members of input%s", x.t.pointer()), at: f.loc(s)}
				if r := f.opaqueScan(s, cur.with(cur.pc.and(b, an.vs.is("vobj", xt))), x, g); r != nil {
					outs = append(outs, r)
				}
			}
			if m.has(mArr) {
				arr := cur.with(cur.pc.and(b, an.vs.is("varr", xt)))
				i := an.boundFor("i", an.m.element(x.t))
				e := an.m.at(x, i)
				e.touch()
				cond := b.And(an.m.d(e), an.assumeValid(e, f.sd.s))
				key := sym{t: an.vs.numV(b.App("to_real", smt.Real, i)), m: mNum}
				if r := f.qscan(s, arr, []*smt.Term{i}, cond, key, e); r != nil {
					outs = append(outs, r)
				}
			}
			// A scalar has no members.
			outs = append(outs, cur.with(cur.pc.and(b, b.Not(b.Or(an.vs.is("varr", xt), an.vs.is("vobj", xt))))))
		default:
			g := &gap{why: "a loop over " + describe(v), at: f.loc(s)}
			if r := f.opaqueScan(s, cur, v, g); r != nil {
				outs = append(outs, r)
			}
		}
	}
	return f.merge(outs, true).withPC(st.pc), fl
}

func (st *state) withPC(p *pc) *state {
	if st == nil {
		return nil
	}
	return &state{pc: p, locals: st.locals}
}

// qscan runs the loop body once on the bound variables vars (members where
// cond holds, key and value bound) and lifts its effects on cur's locals.
func (f *frame) qscan(s *ir.ScanStmt, cur *state, vars []*smt.Term, cond *smt.Term, key, value val) *state {
	an, b := f.sd.an, f.b()
	sub := &frame{sd: f.sd, fn: f.fn}
	root := &pc{}
	entry := &state{pc: root.and(b, cond), locals: cur.locals}
	entry = entry.set(s.Key, an.one(key)).set(s.Value, an.one(value))
	an.depth++
	an.binders = append(an.binders, vars...)
	body := sub.block(s.Block, entry)
	an.binders = an.binders[:len(an.binders)-len(vars)]
	an.depth--
	if len(body.ret) > 0 {
		panic("a return inside a loop")
	}
	// Errors in any iteration are errors.
	if len(sub.errs) > 0 {
		f.fail(cur, b.Exists(vars, b.Or(sub.errs...)))
	}
	done := sub.merge(append(append([]*state(nil), body.exits[-1]...), body.exits[0]...), false)
	if done == nil {
		return cur
	}
	ran := done.pc.term(b) // the iteration got to its end (or an undefined statement)
	out := &state{pc: cur.pc, locals: append(slices.Clone(cur.locals), make([]*slot, max(0, len(done.locals)-len(cur.locals)))...)}
	for l := range done.locals {
		before, after := cur.get(ir.Local(l)), done.get(ir.Local(l))
		if before == after || ir.Local(l) == s.Key || ir.Local(l) == s.Value {
			continue
		}
		out.locals[l] = f.lift(before, after, ran, vars, s)
	}
	return out
}

// lift is what a local holds after the loop, from what it held before and
// after one iteration on the bound variables.
func (f *frame) lift(before, after *slot, ran *smt.Term, vars []*smt.Term, s ir.Stmt) *slot {
	an, b := f.sd.an, f.b()
	old := map[string]bool{}
	for _, a := range before.alts {
		old[valKey(a.v)] = true
	}
	changed := slices.DeleteFunc(slices.Clone(after.alts), func(a alt) bool { return old[valKey(a.v)] })
	if len(changed) == 0 {
		return before
	}
	// Collections one iteration added members to.
	{
		allColl := true
		var out []alt
		for _, a := range changed {
			c, ok := a.v.(*coll)
			if !ok {
				allColl = false
				break
			}
			var base *coll
			for _, o := range before.alts {
				if bc, ok := o.v.(*coll); ok && bc.alloc == c.alloc {
					base = bc
				}
			}
			if base == nil || len(c.elems) < len(base.elems) || !slices.Equal(c.elems[:len(base.elems)], base.elems) {
				allColl = false
				break
			}
			n := len(base.elems)
			nc := &coll{kind: base.kind, alloc: base.alloc, elems: base.elems, q: append([]*qelem(nil), base.q...)}
			for _, e := range c.elems[n:] {
				cond := b.And(ran, a.g, e.g)
				if !an.mentions(e.v, vars) && (e.key == nil || !an.mentions(e.key, vars)) {
					nc.elems = append(nc.elems, &elem{g: b.Exists(vars, cond), key: e.key, v: e.v})
					continue
				}
				nc.q = append(nc.q, &qelem{vars: vars, cond: cond, key: e.key, v: e.v})
			}
			for _, q := range c.q[len(base.q):] {
				nc.q = append(nc.q, &qelem{vars: append(append([]*smt.Term(nil), vars...), q.vars...), cond: b.And(ran, a.g, q.cond), key: q.key, v: q.v})
			}
			out = append(out, alt{g: b.True(), v: nc})
		}
		if allColl && len(out) == 1 && len(before.alts) == 1 {
			return &slot{alts: []alt{{g: before.alts[0].g, v: out[0].v}}}
		}
	}
	// One value, the same in every iteration that set it.
	if len(changed) == 1 && !an.mentions(changed[0].v, vars) {
		set := b.Exists(vars, b.And(ran, changed[0].g))
		return an.joinAlts(otherwise(b, alt{g: set, v: changed[0].v}, before))
	}
	g := &gap{why: "a value a loop over the input sets differently per member", at: f.loc(s)}
	set := b.Exists(vars, b.And(ran, b.Or(altGuards(changed)...)))
	return &slot{alts: otherwise(b, alt{g: set, v: an.opaqueOf(g)}, before)}
}

// otherwise is a, and where its guard does not hold, what before holds.
func otherwise(b *smt.Builder, a alt, before *slot) []alt {
	return append([]alt{a}, mapped(before.alts, func(o alt) alt { return alt{g: b.And(b.Not(a.g), o.g), v: o.v} })...)
}

func altGuards(alts []alt) []*smt.Term {
	out := make([]*smt.Term, len(alts))
	for i, a := range alts {
		out[i] = a.g
	}
	return out
}

// opaqueScan is a loop over members the analysis does not model: the body
// runs once on a bound index whose member, key and value are
// uninterpreted functions of the source (gaps), and its effects are lifted
// as a loop over an input array's are. What the body does with them is
// still the body's: a rule that adds a constant to a set adds that
// constant, where some member makes it.
func (f *frame) opaqueScan(s *ir.ScanStmt, st *state, src val, g *gap) *state {
	an, b := f.sd.an, f.b()
	i := b.Bound(fmt.Sprintf("o!%d!%d", an.token(src).ID(), an.depth), smt.Int)
	idx := sym{t: an.vs.numV(b.App("to_real", smt.Real, i)), m: mNum}
	cond := an.uf("member", smt.Bool, g, src, idx)
	key := an.opaqueUF("key", g, src, idx)
	value := an.opaqueUF("value", g, src, idx)
	return f.qscan(s, st, []*smt.Term{i}, cond, key, value)
}

// mentions reports whether v depends on any of vars.
func (an *analysis) mentions(v val, vars []*smt.Term) bool {
	switch x := v.(type) {
	case conc, nil:
		return false
	case sym:
		return termMentions(x.t, vars)
	case *node:
		return slices.ContainsFunc(x.idx, func(i *smt.Term) bool { return termMentions(i, vars) })
	case *opaque:
		return termMentions(x.tok, vars)
	case *coll:
		for _, e := range x.elems {
			if termMentions(e.g, vars) || an.mentions(e.v, vars) || (e.key != nil && an.mentions(e.key, vars)) {
				return true
			}
		}
		return len(x.q) > 0
	case *overlay:
		return an.mentions(x.base, vars) || an.mentions(x.v, vars)
	}
	return true
}

// termMentions reports whether one of vars occurs free in t (not under a
// quantifier that binds it).
func termMentions(t *smt.Term, vars []*smt.Term) bool {
	if !t.IsBoundTerm() {
		return false
	}
	seen := map[int]bool{}
	var walk func(t *smt.Term) bool
	walk = func(t *smt.Term) bool {
		if !t.IsBoundTerm() || seen[t.ID()] {
			return false
		}
		seen[t.ID()] = true
		if slices.Contains(vars, t) {
			return true
		}
		args := t.Args()
		if smt.IsQuantifier(t) {
			// Those of vars bound here are other variables below; the
			// others may still occur free in the body.
			if slices.ContainsFunc(args[1:], func(b *smt.Term) bool { return slices.Contains(vars, b) }) {
				free := slices.DeleteFunc(slices.Clone(vars), func(v *smt.Term) bool { return slices.Contains(args[1:], v) })
				return len(free) > 0 && termMentions(args[0], free)
			}
			args = args[:1]
		}
		return slices.ContainsFunc(args, walk)
	}
	return walk(t)
}
