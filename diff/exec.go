package diff

import (
	"context"
	"fmt"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/engine/ireval"
)

// The executor runs a plan (the IR OPA's planner makes for its Wasm target,
// the one engine/ireval compiles) symbolically: once, over every input at
// once. Where the plan branches on the input (a statement undefined, a
// loop over a member the policy built), the path splits under a condition
// and joins again after the block; a local that holds different values on
// joined paths holds each under its condition (a slot), and scalars merge
// into one if-then-else term. What a statement means is what ireval's
// closure for it does (engine/ireval/compile.go and eval.go).

// pc is a path condition: a chain of conjuncts, so that the paths joined
// after a block are told apart by what they added since it began.
type pc struct {
	parent *pc
	c      *smt.Term
	depth  int
}

func (p *pc) and(b *smt.Builder, c *smt.Term) *pc {
	if c.IsTrue() {
		return p
	}
	return &pc{parent: p, c: c, depth: p.depth + 1}
}

// term is the whole condition.
func (p *pc) term(b *smt.Builder) *smt.Term { return p.since(b, nil) }

// since is the conjunction of what p adds to its ancestor a.
func (p *pc) since(b *smt.Builder, a *pc) *smt.Term {
	var cs []*smt.Term
	for q := p; q != a && q != nil; q = q.parent {
		if q.c != nil {
			cs = append(cs, q.c)
		}
	}
	return b.And(cs...)
}

func (p *pc) dead() bool { return p.c != nil && p.c.IsFalse() }

// common is the deepest ancestor of all of ps.
func common(ps []*pc) *pc {
	a := ps[0]
	for _, p := range ps[1:] {
		x, y := a, p
		for x.depth > y.depth {
			x = x.parent
		}
		for y.depth > x.depth {
			y = y.parent
		}
		for x != y {
			x, y = x.parent, y.parent
		}
		a = x
	}
	return a
}

// state is one path through a frame: its condition and its locals.
type state struct {
	pc     *pc
	locals []*slot
	retv   *slot // what a ReturnLocalStmt returned
}

func (st *state) get(l ir.Local) *slot {
	if int(l) < len(st.locals) && st.locals[l] != nil {
		return st.locals[l]
	}
	return undefined
}

// set returns a state whose local l holds s (copying the locals).
func (st *state) set(l ir.Local, s *slot) *state {
	out := &state{pc: st.pc, locals: slices.Clone(st.locals)}
	for int(l) >= len(out.locals) {
		out.locals = append(out.locals, nil)
	}
	out.locals[l] = s
	return out
}

func (st *state) with(p *pc) *state { return &state{pc: p, locals: st.locals} }

// flow is how a block (or a statement) ends: the paths that go on after it,
// and those that leave enclosing blocks (exits[r]: r as ireval's stmt
// returns it, 0 being "the current block ends"), or return.
type flow struct {
	exits map[int][]*state
	ret   []*state
}

func (f *flow) exit(r int, st *state) {
	if st == nil || st.pc.dead() {
		return
	}
	if f.exits == nil {
		f.exits = map[int][]*state{}
	}
	f.exits[r] = append(f.exits[r], st)
}

func (f *flow) add(o flow) {
	for r, sts := range o.exits {
		for _, st := range sts {
			f.exit(r, st)
		}
	}
	f.ret = append(f.ret, o.ret...)
}

// side is one revision being executed.
type side struct {
	an     *analysis
	s      int // 0 old, 1 new
	policy *ir.Policy
	strs   []*ast.Term
	funcs  map[string]*ir.Func
	files  []string
	data   *ast.Term
	memo   map[string]*callResult
	busy   map[string]bool
	ctx    context.Context
}

type callResult struct {
	ret *slot
	err *smt.Term
}

// frame is one execution of a function (or the plan): its errors, each
// under the condition (relative to the frame's start) where it happens.
type frame struct {
	sd   *side
	errs []*smt.Term
	fn   string
	cur  ir.Stmt // the statement being run, for messages
}

func (f *frame) b() *smt.Builder { return f.sd.an.vs.b }

// fail records an error of the evaluation where cond holds on st's path.
func (f *frame) fail(st *state, cond *smt.Term) {
	if cond.IsFalse() {
		return
	}
	at := f.loc(f.cur)
	if debugFail != nil {
		debugFail(at, f.cur, cond)
	}
	sites := &f.sd.an.errSites[f.sd.s]
	if !slices.Contains(*sites, at) {
		*sites = append(*sites, at)
	}
	f.errs = append(f.errs, f.b().And(st.pc.term(f.b()), cond))
}

var debugFail func(at string, s ir.Stmt, cond *smt.Term)

func (f *frame) loc(s ir.Stmt) string {
	if s == nil {
		return f.fn
	}
	l := s.GetLocation()
	if l == nil || l.File < 0 || l.File >= len(f.sd.files) {
		return f.fn
	}
	return fmt.Sprintf("%s:%d", f.sd.files[l.File], l.Row)
}

// propagate records a callee's errors where cond holds on st's path.
func (f *frame) propagate(st *state, cond *smt.Term) {
	if !cond.IsFalse() {
		f.errs = append(f.errs, f.b().And(st.pc.term(f.b()), cond))
	}
}

// merge joins the paths sts into one state: its condition is their
// common ancestor's and one of theirs since, and each local holds each
// path's value under what that path added.
func (f *frame) merge(sts []*state, total bool) *state {
	live := slices.DeleteFunc(slices.Clone(sts), func(st *state) bool { return st == nil || st.pc.dead() })
	switch len(live) {
	case 0:
		return nil
	case 1:
		return live[0]
	}
	b := f.b()
	anc := common(mapped(live, func(st *state) *pc { return st.pc }))
	rel := mapped(live, func(st *state) *smt.Term { return st.pc.since(b, anc) })
	out := &state{pc: anc}
	if !total {
		out.pc = anc.and(b, b.Or(rel...))
	}
	n := 0
	for _, st := range live {
		n = max(n, len(st.locals))
	}
	out.locals = make([]*slot, n)
	for l := 0; l < n; l++ {
		first := live[0].get(ir.Local(l))
		if !slices.ContainsFunc(live[1:], func(st *state) bool { return st.get(ir.Local(l)) != first }) {
			if first != undefined {
				out.locals[l] = first
			}
			continue
		}
		var alts []alt
		for i, st := range live {
			for _, a := range st.get(ir.Local(l)).alts {
				alts = append(alts, alt{g: b.And(rel[i], a.g), v: a.v})
			}
		}
		out.locals[l] = f.sd.an.joinAlts(alts)
	}
	return out
}

// joinAlts merges alternatives that hold the same value, or collections
// made by one statement, into one; and scalars into one if-then-else term.
func (an *analysis) joinAlts(alts []alt) *slot {
	b := an.vs.b
	var out []alt
	for _, a := range alts {
		if a.g.IsFalse() {
			continue
		}
		merged := false
		for i, o := range out {
			if v, ok := an.joinVal(o, a); ok {
				out[i] = alt{g: b.Or(o.g, a.g), v: v}
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, a)
		}
	}
	// Scalars: one term.
	var rest []alt
	var sc *alt
	for _, a := range out {
		t, ok := an.scalarOf(a.v)
		switch {
		case !ok:
			rest = append(rest, a)
		case sc == nil:
			c := a
			sc = &c
		default:
			cur, _ := an.scalarOf(sc.v)
			sc = &alt{g: b.Or(sc.g, a.g), v: sym{t: b.Ite(a.g, t.t, cur.t), m: cur.m | t.m}}
		}
	}
	if sc != nil {
		rest = append(rest, *sc)
	}
	if len(rest) == 0 {
		return undefined
	}
	return &slot{alts: rest}
}

// scalarOf is a scalar value as a V term.
func (an *analysis) scalarOf(v val) (sym, bool) {
	switch v := v.(type) {
	case sym:
		return v, true
	case conc:
		if t, ok := an.vs.scalarTerm(v.t.Value); ok {
			return sym{t: t, m: maskOf(v.t.Value)}, true
		}
	}
	return sym{}, false
}

// joinVal merges two alternatives holding the same value, or collections
// of one allocation: the members they share, and each one's own under its
// guard.
func (an *analysis) joinVal(x, y alt) (val, bool) {
	switch xv := x.v.(type) {
	case *node:
		if yv, ok := y.v.(*node); ok && xv.key() == yv.key() {
			return xv, true
		}
	case *opaque:
		if yv, ok := y.v.(*opaque); ok && xv.tok == yv.tok {
			return xv, true
		}
	case conc:
		if yv, ok := y.v.(conc); ok && ast.Compare(xv.t, yv.t) == 0 {
			return xv, true
		}
	case *coll:
		yv, ok := y.v.(*coll)
		if !ok || xv.alloc != yv.alloc || xv.kind != yv.kind {
			return nil, false
		}
		if xv == yv {
			return xv, true
		}
		b := an.vs.b
		return &coll{kind: xv.kind, alloc: xv.alloc, elems: joinMembers(b, xv.elems, yv.elems, x.g, y.g, (*elem).guarded), q: joinMembers(b, xv.q, yv.q, x.g, y.g, (*qelem).guarded)}, true
	}
	return nil, false
}

// joinMembers joins two versions of one collection's members: what they
// share, then the rest of each under its path's guard.
func joinMembers[T comparable](b *smt.Builder, xs, ys []T, gx, gy *smt.Term, guarded func(T, *smt.Builder, *smt.Term) T) []T {
	n := 0
	for n < len(xs) && n < len(ys) && xs[n] == ys[n] {
		n++
	}
	out := append([]T(nil), xs[:n]...)
	for _, e := range xs[n:] {
		out = append(out, guarded(e, b, gx))
	}
	for _, e := range ys[n:] {
		out = append(out, guarded(e, b, gy))
	}
	return out
}

// operand reads an operand on st.
func (f *frame) operand(st *state, o ir.Operand) *slot {
	switch v := ireval.PlainVal(o.Value).(type) {
	case ir.Local:
		return st.get(v)
	case ir.StringIndex:
		if int(v) < 0 || int(v) >= len(f.sd.strs) {
			panic(fmt.Sprintf("string constant %d out of range", v))
		}
		return f.sd.an.one(conc{f.sd.strs[v]})
	case ir.Bool:
		return f.sd.an.one(conc{ast.InternedTerm(bool(v))})
	}
	panic(fmt.Sprintf("operand of type %T", o.Value))
}

func (an *analysis) one(v val) *slot { return &slot{alts: []alt{{g: an.vs.b.True(), v: v}}} }

// def is the condition that s holds a value.
func (an *analysis) def(s *slot) *smt.Term { return an.vs.b.Or(altGuards(s.alts)...) }

// blocks runs the top-level blocks of a plan or a function from st, each
// from where the one before ends, and returns the paths that return.
func (f *frame) blocks(blocks []*ir.Block, st *state) []*state {
	var rets []*state
	for _, blk := range blocks {
		if st == nil {
			break
		}
		fl := f.block(blk, st)
		for r := range fl.exits {
			if r > 0 {
				panic(fmt.Sprintf("%s: a break leaves its top-level block", f.fn))
			}
		}
		rets = append(rets, fl.ret...)
		st = f.cont(fl, st)
	}
	return rets
}

// block runs the statements of blk from st.
func (f *frame) block(blk *ir.Block, st *state) flow {
	var fl flow
	cur := st
	for _, s := range blk.Stmts {
		if cur == nil {
			break
		}
		if err := f.sd.ctx.Err(); err != nil {
			panic(err)
		}
		f.cur = s
		next, sf := f.stmt(s, cur)
		fl.add(sf)
		cur = next
	}
	if cur != nil {
		fl.exit(-1, cur) // fell off the end
	}
	return fl
}

// cont is the paths that go on after a block of fl ended: its end and its
// undefined statements.
func (f *frame) cont(fl flow, entry *state) *state {
	sts := append(fl.exits[-1], fl.exits[0]...)
	total := entry != nil && len(fl.ret) == 0
	for r := range fl.exits {
		if r > 0 {
			total = false
		}
	}
	m := f.merge(sts, total)
	if m != nil && total && entry != nil {
		m.pc = entry.pc
	}
	return m
}

// split is st on the path where ok holds (nil when it cannot), and the
// flow that leaves the block where it does not.
func (f *frame) split(st *state, ok *smt.Term) (*state, flow) {
	var fl flow
	b := f.b()
	if ok.IsTrue() {
		return st, fl
	}
	fl.exit(0, st.with(st.pc.and(b, b.Not(ok))))
	if ok.IsFalse() {
		return nil, fl
	}
	return st.with(st.pc.and(b, ok)), fl
}

// assign is st with target set to the join of alts, on the paths where
// that is defined.
func (f *frame) assign(st *state, target ir.Local, alts []alt) (*state, flow) {
	res := f.sd.an.joinAlts(alts)
	next, fl := f.split(st, f.sd.an.def(res))
	if next == nil {
		return nil, fl
	}
	return next.set(target, res), fl
}

// stmt runs one statement: the state after it (nil when no path goes on)
// and the paths that leave.
func (f *frame) stmt(s ir.Stmt, st *state) (*state, flow) {
	an := f.sd.an
	b := f.b()
	switch s := s.(type) {
	case *ir.NopStmt:
		return st, flow{}

	case *ir.BreakStmt:
		var fl flow
		fl.exit(int(s.Index), st)
		return nil, fl

	case *ir.ReturnLocalStmt:
		r := &state{pc: st.pc, locals: st.locals, retv: st.get(s.Source)}
		return nil, flow{ret: []*state{r}}

	case *ir.ResultSetAddStmt:
		v := st.get(s.Value)
		ok := an.def(v)
		next, fl := f.split(st, ok)
		if next == nil {
			return nil, fl
		}
		f.sd.an.results[f.sd.s] = append(f.sd.an.results[f.sd.s], result{pc: next.pc.term(b), v: v})
		return next, fl

	case *ir.BlockStmt:
		var fl flow
		cur := st
		for _, blk := range s.Blocks {
			if cur == nil || blk == nil {
				continue
			}
			bf := f.block(blk, cur)
			for r, sts := range bf.exits {
				if r > 0 {
					for _, x := range sts {
						fl.exit(r-1, x)
					}
				}
			}
			fl.ret = append(fl.ret, bf.ret...)
			cur = f.cont(bf, cur)
		}
		return cur, fl

	case *ir.ScanStmt:
		return f.scan(s, st)

	case *ir.NotStmt:
		bf := f.block(s.Block, st)
		var fl flow
		// The negated block held: not is undefined.
		for _, x := range bf.exits[-1] {
			fl.exit(0, x)
		}
		fl.ret = append(fl.ret, bf.ret...)
		next := f.merge(bf.exits[0], false)
		return next, fl

	case *ir.WithStmt:
		return f.with(s, st)

	case *ir.CallStmt:
		return f.call(s, st)

	case *ir.CallDynamicStmt:
		g := &gap{why: "a dynamic call (a rule reference with a variable)", at: f.loc(s)}
		return st.set(s.Result, an.one(an.opaqueOf(g))), flow{}

	case *ir.DotStmt:
		src, key := f.operand(st, s.Source), f.operand(st, s.Key)
		var alts []alt
		for _, x := range src.alts {
			for _, k := range key.alts {
				for _, r := range f.dot(x.v, k.v, s) {
					alts = append(alts, alt{g: b.And(x.g, k.g, r.g), v: r.v})
				}
			}
		}
		return f.assign(st, s.Target, alts)

	case *ir.LenStmt:
		src := f.operand(st, s.Source)
		var alts []alt
		for _, x := range src.alts {
			n, ok := an.length(x.v, f.sd.s)
			if ok == nil {
				continue
			}
			alts = append(alts, alt{g: b.And(x.g, ok), v: sym{t: an.vs.numV(b.App("to_real", smt.Real, n)), m: mNum}})
		}
		return f.assign(st, s.Target, alts)

	case *ir.EqualStmt, *ir.NotEqualStmt:
		var x, y ir.Operand
		want := true
		if e, ok := s.(*ir.EqualStmt); ok {
			x, y = e.A, e.B
		} else {
			ne := s.(*ir.NotEqualStmt)
			x, y, want = ne.A, ne.B, false
		}
		eq := an.eqSlots(f.operand(st, x), f.operand(st, y), f.sd.s, f.loc(s))
		ok := b.And(an.def(f.operand(st, x)), an.def(f.operand(st, y)))
		if !want {
			eq = b.Not(eq)
		}
		return f.split(st, b.And(ok, eq))

	case *ir.IsArrayStmt:
		return f.isKind(st, s.Source, mArr)
	case *ir.IsObjectStmt:
		return f.isKind(st, s.Source, mObj)
	case *ir.IsSetStmt:
		return f.isKind(st, s.Source, mSet)

	case *ir.IsDefinedStmt:
		src := st.get(s.Source)
		next, fl := f.split(st, an.def(src))
		if next != nil && len(src.alts) == 1 && !src.alts[0].g.IsTrue() {
			// Where it is defined, its one value is there: say so, so
			// that what reads it on this path needs no guard.
			next = next.set(s.Source, an.one(src.alts[0].v))
		}
		return next, fl
	case *ir.IsUndefinedStmt:
		next, fl := f.split(st, b.Not(an.def(st.get(s.Source))))
		if next != nil {
			next = next.set(s.Source, undefined) // as it is on this path
		}
		return next, fl

	case *ir.ResetLocalStmt:
		return st.set(s.Target, undefined), flow{}
	case *ir.AssignIntStmt:
		return st.set(s.Target, an.one(conc{ast.InternedTerm(int(s.Value))})), flow{}
	case *ir.AssignVarStmt:
		return st.set(s.Target, f.operand(st, s.Source)), flow{}
	case *ir.AssignVarOnceStmt:
		src := f.operand(st, s.Source)
		cur := st.get(s.Target)
		if len(cur.alts) == 0 {
			return st.set(s.Target, src), flow{}
		}
		// Where the target holds a value, the source must hold the same:
		// else "complete rules must not produce multiple outputs".
		dc := an.def(cur)
		f.fail(st, b.And(dc, b.Not(b.And(an.def(src), an.eqSlots(cur, src, f.sd.s, f.loc(s))))))
		var alts []alt
		alts = append(alts, cur.alts...)
		for _, a := range src.alts {
			alts = append(alts, alt{g: b.And(b.Not(dc), a.g), v: a.v})
		}
		return st.set(s.Target, an.joinAlts(alts)), flow{}
	case *ir.MakeNullStmt:
		return st.set(s.Target, an.one(conc{ast.InternedNullTerm})), flow{}
	case *ir.MakeNumberIntStmt:
		return st.set(s.Target, an.one(conc{ast.InternedTerm(int(s.Value))})), flow{}
	case *ir.MakeNumberRefStmt:
		if s.Index < 0 || s.Index >= len(f.sd.strs) {
			panic("number constant out of range")
		}
		lit := f.sd.strs[s.Index].Value.(ast.String)
		return st.set(s.Target, an.one(conc{ast.NewTerm(ast.Number(lit))})), flow{}
	case *ir.MakeArrayStmt:
		return st.set(s.Target, an.one(an.newColl(kArray))), flow{}
	case *ir.MakeObjectStmt:
		return st.set(s.Target, an.one(an.newColl(kObject))), flow{}
	case *ir.MakeSetStmt:
		return st.set(s.Target, an.one(an.newColl(kSet))), flow{}

	case *ir.ArrayAppendStmt:
		return f.addMember(st, s.Array, nil, f.operand(st, s.Value), s)
	case *ir.SetAddStmt:
		return f.addMember(st, s.Set, nil, f.operand(st, s.Value), s)
	case *ir.ObjectInsertStmt:
		return f.addMember(st, s.Object, f.operand(st, s.Key), f.operand(st, s.Value), s)
	case *ir.ObjectInsertOnceStmt:
		return f.addMember(st, s.Object, f.operand(st, s.Key), f.operand(st, s.Value), s)

	case *ir.ObjectMergeStmt:
		x, y := st.get(s.A), st.get(s.B)
		var alts []alt
		for _, a := range x.alts {
			for _, c := range y.alts {
				ca, ok1 := a.v.(conc)
				cc, ok2 := c.v.(conc)
				if ok1 && ok2 {
					if xo, ok := ca.t.Value.(ast.Object); ok {
						if yo, ok := cc.t.Value.(ast.Object); ok {
							if m, ok := xo.Merge(yo); ok {
								alts = append(alts, alt{g: b.And(a.g, c.g), v: conc{ast.NewTerm(m)}})
								continue
							}
						}
					}
				}
				g := &gap{why: "merging base and virtual documents", at: f.loc(s)}
				alts = append(alts, alt{g: b.And(a.g, c.g), v: an.opaqueOf(g)})
			}
		}
		return f.assign(st, s.Target, alts)
	}
	panic(fmt.Sprintf("statement %T", s))
}

func (f *frame) isKind(st *state, o ir.Operand, k mask) (*state, flow) {
	an, b := f.sd.an, f.b()
	ok := mapped(f.operand(st, o).alts, func(a alt) *smt.Term { return b.And(a.g, an.kindIs(a.v, k, f.sd.s)) })
	return f.split(st, b.Or(ok...))
}

// addMember appends to an array, adds to a set or inserts into an object
// the plan made (key nil but for objects). Every local that holds the same
// collection sees the change, as ireval's in-place update does.
func (f *frame) addMember(st *state, target ir.Local, key, value *slot, s ir.Stmt) (*state, flow) {
	an, b := f.sd.an, f.b()
	ok := an.def(value)
	if key != nil {
		ok = b.And(ok, an.def(key))
	}
	cur := st.get(target)
	ok = b.And(ok, an.def(cur))
	next, fl := f.split(st, ok)
	if next == nil {
		return nil, fl
	}
	_, once := s.(*ir.ObjectInsertOnceStmt)
	updated := map[*coll]*coll{}
	for _, a := range cur.alts {
		c, isColl := a.v.(*coll)
		if !isColl {
			panic(fmt.Sprintf("%s: adding a member to %s, which the plan did not make", f.loc(s), describe(a.v)))
		}
		nc := c
		if key == nil {
			for _, v := range value.alts {
				nc = nc.with(&elem{g: v.g, v: an.settle(v.v)})
			}
		} else {
			nc = f.insert(next, nc, key, value, once, s)
		}
		updated[c] = nc
	}
	out := &state{pc: next.pc, locals: slices.Clone(next.locals)}
	for l, sl := range out.locals {
		if sl == nil {
			continue
		}
		var changed bool
		alts := slices.Clone(sl.alts)
		for i, a := range alts {
			if c, ok := a.v.(*coll); ok {
				if nc, ok := updated[c]; ok {
					alts[i].v = nc
					changed = true
				}
			}
		}
		if changed {
			out.locals[l] = &slot{alts: alts}
		}
	}
	return out, fl
}

// settle is a collection whose members are all constants and present, as
// the constant it is; any other value as it is.
func (an *analysis) settle(v val) val {
	if c, ok := v.(*coll); ok {
		if t, ok := c.concrete(); ok {
			return conc{t}
		}
	}
	return v
}

// insert puts key: value into object c; a constant key already there is
// replaced in place (ObjectInsertOnce fails when the values differ).
func (f *frame) insert(st *state, c *coll, key, value *slot, once bool, s ir.Stmt) *coll {
	an, b := f.sd.an, f.b()
	out := c
	for _, k := range key.alts {
		for _, v := range value.alts {
			g := b.And(k.g, v.g)
			replaced := false
			if kc, ok := k.v.(conc); ok {
				for i, e := range out.elems {
					if ec, ok := e.key.(conc); ok && ast.Compare(ec.t, kc.t) == 0 {
						if once {
							f.fail(st, b.And(g, e.g, b.Not(an.eqVals(e.v, v.v, f.sd.s, f.loc(s)))))
						}
						// The new value where g holds, the old one elsewhere.
						n := &coll{kind: out.kind, alloc: out.alloc, elems: slices.Clone(out.elems), q: out.q}
						n.elems[i] = &elem{g: b.And(b.Not(g), e.g), key: e.key, v: e.v}
						n.elems = append(n.elems, &elem{g: g, key: k.v, v: an.settle(v.v)})
						out, replaced = n, true
						break
					}
				}
			} else if once {
				for _, e := range out.elems {
					f.fail(st, b.And(g, e.g, an.eqVals(e.key, k.v, f.sd.s, f.loc(s)), b.Not(an.eqVals(e.v, v.v, f.sd.s, f.loc(s)))))
				}
			}
			if !replaced {
				out = out.with(&elem{g: g, key: k.v, v: an.settle(v.v)})
			}
		}
	}
	return out
}

// with runs a block with the input or data replaced (at a path).
func (f *frame) with(s *ir.WithStmt, st *state) (*state, flow) {
	an := f.sd.an
	val := f.operand(st, s.Value)
	path := make([]*ast.Term, len(s.Path))
	for i, idx := range s.Path {
		if idx < 0 || idx >= len(f.sd.strs) {
			panic("with path out of range")
		}
		path[i] = f.sd.strs[idx]
	}
	saved := st.get(s.Local)
	var replaced *slot
	if len(path) == 0 {
		replaced = val
	} else {
		var alts []alt
		for _, base := range append(saved.alts, alt{g: f.b().Not(an.def(saved))}) {
			for _, v := range val.alts {
				alts = append(alts, alt{g: f.b().And(base.g, v.g), v: an.upsert(base.v, path, v.v)})
			}
		}
		replaced = &slot{alts: alts}
	}
	bf := f.block(s.Block, st.set(s.Local, replaced))
	var fl flow
	for r, sts := range bf.exits {
		for _, x := range sts {
			fl.exit(r, x.set(s.Local, saved))
		}
	}
	fl.ret = append(fl.ret, bf.ret...)
	next := f.merge(fl.exits[-1], false)
	delete(fl.exits, -1)
	return next, fl
}
