package diff

import (
	"fmt"
	"math/big"
	"math/bits"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/engine/ireval"
)

// The operations on symbolic values that statements and builtins share:
// member lookup, equality, order, length, kind tests. Each is what OPA does
// on concrete values (ast.Compare, topdown's dot), lifted to terms; where a
// case is outside the encoding it is an uninterpreted function of the
// values' tokens, registered as a gap.

func (an *analysis) newColl(k collKind) *coll {
	an.nalloc++
	return &coll{kind: k, alloc: an.nalloc}
}

// opaqueOf is a fresh value the analysis does not model.
func (an *analysis) opaqueOf(g *gap) *opaque {
	v := an.vs.b.Fresh("opq", smt.Int)
	an.gapVars[v.Name()] = g
	return &opaque{tok: an.vs.b.App("vtok", sV, v), gap: g}
}

// uf applies the uninterpreted function name (registered as gap g) to
// the tokens of args: the same computation on the same values is the
// same term in both revisions.
func (an *analysis) uf(name string, s smt.Sort, g *gap, args ...val) *smt.Term {
	toks := mapped(args, an.token)
	if len(toks) == 0 {
		toks = []*smt.Term{an.vs.b.IntLit(0)}
	}
	fn := fmt.Sprintf("%s!%d", name, len(toks))
	if _, ok := an.gapVars[fn]; !ok {
		an.gapVars[fn] = g
	}
	return an.vs.b.Fun(fn, s, toks...)
}

// opaqueUF is an opaque value computed by name from args.
func (an *analysis) opaqueUF(name string, g *gap, args ...val) *opaque {
	t := an.uf("u!"+name, smt.Int, g, args...)
	return &opaque{tok: an.vs.b.App("vtok", sV, t), gap: g}
}

// token is a V term that identifies a value: equal tokens, equal values.
func (an *analysis) token(v val) *smt.Term {
	b := an.vs.b
	switch v := v.(type) {
	case conc:
		if _, ok := v.t.Value.(ast.Number); !ok {
			if t, ok := an.vs.scalarTerm(v.t.Value); ok {
				return t
			}
		}
		s, ok := b.StrLit(v.t.String())
		if !ok {
			return b.App("vtok", sV, b.Fresh("big", smt.Int))
		}
		return b.App("vtok", sV, b.Fun("tokc", smt.Int, s))
	case sym:
		if !v.m.has(mNum) {
			return v.t
		}
		// A number's text can matter (sprintf of 1.0); its value is all a
		// term has, so it is its own token only where it is an integer.
		return b.App("vtok", sV, b.Fun("tokn", smt.Int, v.t))
	case *node:
		return b.App("vtok", sV, b.Fun(fmt.Sprintf("tokx%d", v.t.id), smt.Int, append([]*smt.Term{b.IntLit(0)}, v.idx...)...))
	case *opaque:
		return v.tok
	case *coll:
		acc := b.App("vnull", sV)
		for _, e := range v.elems {
			k := acc
			if e.key != nil {
				k = an.token(e.key)
			}
			acc = b.App("vtok", sV, b.Fun("tokl", smt.Int, b.Ite(e.g, b.IntLit(1), b.IntLit(0)), k, an.token(e.v), acc))
		}
		for range v.q {
			acc = b.App("vtok", sV, b.Fun("tokq", smt.Int, acc, b.Fresh("q", smt.Int)))
		}
		return b.App("vtok", sV, b.Fun(fmt.Sprintf("tokk%d", v.kind), smt.Int, acc))
	case *overlay:
		return b.App("vtok", sV, b.Fun("tokw", smt.Int, an.token(v.base), an.token(conc{v.key}), an.token(v.v)))
	case nil:
		return b.App("vnull", sV)
	}
	panic(fmt.Sprintf("token of %T", v))
}

// vterm is a value as a V term with what kinds it may hold, for scalars
// and the input's nodes (whose collections V holds only by length).
func (an *analysis) vterm(v val, s int) (*smt.Term, mask, bool) {
	switch v := v.(type) {
	case conc:
		if t, ok := an.vs.scalarTerm(v.t.Value); ok {
			return t, maskOf(v.t.Value), true
		}
	case sym:
		return v.t, v.m, true
	case *node:
		v.touch()
		return an.m.x(v), v.t.mask[s], true
	}
	return nil, 0, false
}

// kindIs is the formula that v's kind is in k.
func (an *analysis) kindIs(v val, k mask, s int) *smt.Term {
	b := an.vs.b
	switch v := v.(type) {
	case conc:
		return b.BoolLit(maskOf(v.t.Value)&k&^mFrac != 0)
	case *coll:
		return b.BoolLit(map[collKind]mask{kArray: mArr, kSet: mSet, kObject: mObj}[v.kind]&k != 0)
	case *overlay:
		return b.BoolLit(k.has(mObj))
	case *opaque:
		return an.uf(fmt.Sprintf("kind%d", k), smt.Bool, v.gap, v)
	}
	t, m, _ := an.vterm(v, s)
	m &^= mFrac
	switch {
	case m&k == 0:
		return b.False()
	case m&^k == 0:
		return b.True() // the schema admits nothing else here
	}
	return an.vs.kindTest(t, k)
}

// length is the number of members of a collection, and where v is one.
func (an *analysis) length(v val, s int) (*smt.Term, *smt.Term) {
	b := an.vs.b
	switch v := v.(type) {
	case conc:
		if x, ok := v.t.Value.(interface{ Len() int }); ok && maskOf(v.t.Value).has(mColl) {
			return b.IntLit(int64(x.Len())), b.True()
		}
		return nil, nil
	case *node:
		v.touch()
		ok := an.kindIs(v, mArr|mObj, s)
		if v.t.mask[s]&(mArr|mObj) == 0 {
			return nil, nil
		}
		return an.m.length(v), ok
	case *coll:
		return an.count(v, s), b.True()
	case *opaque:
		return an.uf("len", smt.Int, v.gap, v), an.uf("haslen", smt.Bool, v.gap, v)
	case *overlay:
		g := &gap{why: "the length of a document replaced by with"}
		return an.uf("len", smt.Int, g, v), b.True()
	}
	return nil, nil
}

// count is the number of members of c: an array's present members, a
// set's distinct present values, an object's present keys.
func (an *analysis) count(c *coll, s int) *smt.Term {
	b := an.vs.b
	var terms []*smt.Term
	for i, e := range c.elems {
		g := e.g
		if c.kind != kArray {
			// Counted at its first present copy only.
			for _, p := range c.elems[:i] {
				x, y := e.v, p.v
				if c.kind == kObject {
					x, y = e.key, p.key
				}
				g = b.And(g, b.Not(b.And(p.g, an.eqVals(x, y, s, ""))))
			}
		}
		terms = append(terms, b.Ite(g, b.IntLit(1), b.IntLit(0)))
	}
	plain := b.Add(smt.Int, terms...)
	if len(c.q) == 0 {
		return plain
	}
	return an.qcount(c, plain)
}

// dot looks key up in src, as topdown's dot does: alternatives of the
// result, each under its condition.
func (f *frame) dot(src, key val, s ir.Stmt) []alt {
	an := f.sd.an
	b := f.b()
	side := f.sd.s
	switch x := src.(type) {
	case conc:
		if k, ok := key.(conc); ok {
			if r := ireval.Dot(x.t, k.t); r != nil {
				return []alt{{g: b.True(), v: conc{r}}}
			}
			return nil
		}
		if c, ok := an.vs.concColl(x.t); ok {
			return f.dot(c, key, s)
		}
		return nil
	case *coll:
		var out []alt
		switch x.kind {
		case kObject:
			for _, e := range x.elems {
				out = append(out, alt{g: b.And(e.g, an.eqVals(e.key, key, side, f.loc(s))), v: e.v})
			}
		case kSet:
			for _, e := range x.elems {
				out = append(out, alt{g: b.And(e.g, an.eqVals(e.v, key, side, f.loc(s))), v: key})
			}
		case kArray:
			if k, ok := intOf(key); ok && k.Sign() == 0 {
				// The first present member: no arithmetic.
				none := b.True()
				for _, e := range x.elems {
					out = append(out, alt{g: b.And(none, e.g), v: e.v})
					none = b.And(none, b.Not(e.g))
				}
				break
			}
			pos := b.IntLit(0)
			kt, km, ok := an.vterm(key, side)
			if !ok || !km.has(mNum) {
				return nil
			}
			for _, e := range x.elems {
				hit := b.And(e.g, an.vs.is("vnum", kt), b.Eq(an.vs.num(kt), b.App("to_real", smt.Real, pos)))
				out = append(out, alt{g: hit, v: e.v})
				pos = b.Add(smt.Int, pos, b.Ite(e.g, b.IntLit(1), b.IntLit(0)))
			}
		}
		if len(x.q) > 0 {
			g := &gap{why: "a member of a collection built by a loop over the input", at: f.loc(s)}
			out = append(out, alt{g: an.uf("has", smt.Bool, g, x, key), v: an.opaqueUF("member", g, x, key)})
		}
		return out
	case *node:
		x.touch()
		if k, ok := key.(conc); ok {
			switch kv := k.t.Value.(type) {
			case ast.String:
				if !x.t.mask[side].has(mObj) {
					return nil
				}
				m := an.m.member(x, string(kv))
				return []alt{{g: an.m.d(m), v: m}}
			case ast.Number:
				i, ok := kv.Int64()
				if !ok || !x.t.mask[side].has(mArr) {
					return nil
				}
				e := an.m.at(x, b.IntLit(i))
				an.elementRead(e)
				return []alt{{g: an.m.d(e), v: e}}
			}
			return nil
		}
		kt, km, ok := an.vterm(key, side)
		if !ok {
			g := &gap{why: "a member lookup with a key that is a collection", at: f.loc(s)}
			return []alt{{g: an.uf("has", smt.Bool, g, x, key), v: an.opaqueUF("member", g, x, key)}}
		}
		var out []alt
		if km.has(mNum) && x.t.mask[side].has(mArr) {
			idx := b.App("to_int", smt.Int, an.vs.num(kt))
			e := an.m.at(x, idx)
			an.elementRead(e)
			out = append(out, alt{g: b.And(an.vs.isInt(kt), an.m.d(e)), v: e})
		}
		if km.has(mStr) && x.t.mask[side].has(mObj) {
			g := &gap{why: fmt.Sprintf("a member of input%s chosen by a value the input holds", x.t.pointer()), at: f.loc(s)}
			out = append(out, alt{g: b.And(an.vs.is("vstr", kt), an.uf("has", smt.Bool, g, x, key)), v: an.opaqueUF("member", g, x, key)})
		}
		return out
	case *overlay:
		if k, ok := key.(conc); ok {
			if ast.Compare(k.t, x.key) == 0 {
				return []alt{{g: b.True(), v: x.v}}
			}
			if x.base == nil {
				return nil
			}
			return f.dot(x.base, key, s)
		}
		g := &gap{why: "a member chosen at run time of a document replaced by with", at: f.loc(s)}
		return []alt{{g: an.uf("has", smt.Bool, g, x, key), v: an.opaqueUF("member", g, x, key)}}
	case *opaque:
		return []alt{{g: an.uf("has", smt.Bool, x.gap, x, key), v: an.opaqueUF("member", x.gap, x, key)}}
	}
	return nil // a scalar has no members
}

// overlay is a document with the member at key replaced (with ... as).
type overlay struct {
	base val // nil: no object there
	key  *ast.Term
	v    val
}

// upsert is base with v at path, as ireval's upsert: missing or
// non-object documents on the way become objects.
func (an *analysis) upsert(base val, path []*ast.Term, v val) val {
	if len(path) == 0 {
		return v
	}
	if base != nil {
		if c, ok := base.(conc); ok {
			if _, isObj := c.t.Value.(ast.Object); !isObj {
				base = nil
			}
			if cv, ok := v.(conc); ok && base != nil {
				if out, ok := concUpsert(c.t, path, cv.t); ok {
					return conc{out}
				}
			}
		}
	}
	var child val
	if base != nil {
		switch bv := base.(type) {
		case conc:
			if r := ireval.Dot(bv.t, path[0]); r != nil {
				child = conc{r}
			}
		case *node:
			if s, ok := path[0].Value.(ast.String); ok {
				child = an.m.member(bv, string(s))
			}
		case *overlay:
			if ast.Compare(bv.key, path[0]) == 0 {
				child = bv.v
			}
		}
	}
	return &overlay{base: base, key: path[0], v: an.upsert(child, path[1:], v)}
}

func concUpsert(root *ast.Term, path []*ast.Term, v *ast.Term) (*ast.Term, bool) {
	if len(path) == 0 {
		return v, true
	}
	o, ok := root.Value.(ast.Object)
	if !ok {
		o = ast.NewObject()
	}
	out := ast.NewObject()
	o.Foreach(func(k, x *ast.Term) { out.Insert(k, x) })
	child := out.Get(path[0])
	if child == nil {
		child = ast.NewTerm(ast.NewObject())
	}
	nv, ok := concUpsert(child, path[1:], v)
	if !ok {
		return nil, false
	}
	out.Insert(path[0], nv)
	return ast.NewTerm(out), true
}

// eqSlots is the formula that two slots hold equal values (where both do).
func (an *analysis) eqSlots(x, y *slot, s int, at string) *smt.Term {
	b := an.vs.b
	var out []*smt.Term
	for _, a := range x.alts {
		for _, c := range y.alts {
			out = append(out, b.And(a.g, c.g, an.eqVals(a.v, c.v, s, at)))
		}
	}
	return b.Or(out...)
}

// eqVals is Rego's equality of two values.
func (an *analysis) eqVals(x, y val, s int, at string) *smt.Term {
	b := an.vs.b
	if cx, ok := x.(conc); ok {
		if cy, ok := y.(conc); ok {
			return b.BoolLit(ast.Compare(cx.t, cy.t) == 0)
		}
		if c, ok := an.vs.concColl(cx.t); ok {
			x = c
		}
	}
	if cy, ok := y.(conc); ok {
		if c, ok := an.vs.concColl(cy.t); ok {
			y = c
		}
	}
	if _, ok := x.(*opaque); ok {
		return an.eqOpaque(x, y)
	}
	if _, ok := y.(*opaque); ok {
		return an.eqOpaque(y, x)
	}
	if _, ok := x.(*overlay); ok {
		return an.eqOpaque(x, y)
	}
	if _, ok := y.(*overlay); ok {
		return an.eqOpaque(y, x)
	}
	cx, xColl := x.(*coll)
	cy, yColl := y.(*coll)
	switch {
	case xColl && yColl:
		return an.eqColls(cx, cy, s, at)
	case xColl:
		return an.eqCollVal(cx, y, s, at)
	case yColl:
		return an.eqCollVal(cy, x, s, at)
	}
	tx, mx, _ := an.vterm(x, s)
	ty, my, _ := an.vterm(y, s)
	nx, xNode := x.(*node)
	ny, yNode := y.(*node)
	if xNode && yNode && nx.key() == ny.key() {
		return b.True()
	}
	eq := b.Eq(tx, ty)
	if (mx & my & (mArr | mObj)) != 0 {
		// Two collections of the input: V holds only their lengths.
		g := &gap{why: "comparing two collections of the input", at: at}
		same := b.Or(b.And(an.vs.is("varr", tx), an.vs.is("varr", ty)), b.And(an.vs.is("vobj", tx), an.vs.is("vobj", ty)))
		eq = b.Ite(same, an.uf("eq", smt.Bool, g, x, y), eq)
	}
	if mx.has(mFrac) && my.has(mFrac) {
		eq = b.Ite(an.bothFrac(tx, ty), an.uf("eqf", smt.Bool, &gap{why: "comparing two numbers that may both have a fraction (OPA compares them as float64)", at: at}, x, y), eq)
	}
	return eq
}

func (an *analysis) bothFrac(x, y *smt.Term) *smt.Term {
	vs := an.vs
	return vs.b.And(vs.is("vnum", x), vs.is("vnum", y), vs.b.Not(vs.intReal(vs.num(x))), vs.b.Not(vs.intReal(vs.num(y))))
}

func (an *analysis) eqOpaque(x, y val) *smt.Term {
	g := &gap{why: "equality with a value the analysis does not model"}
	if o, ok := x.(*opaque); ok {
		g = o.gap
	}
	if an.token(x).ID() > an.token(y).ID() {
		x, y = y, x
	}
	return an.uf("eq", smt.Bool, g, x, y)
}

// eqColls compares two collections the policy built.
func (an *analysis) eqColls(x, y *coll, s int, at string) *smt.Term {
	b := an.vs.b
	if x.kind != y.kind {
		return b.False()
	}
	if sameColl(x, y) {
		return b.True()
	}
	if len(x.q) > 0 || len(y.q) > 0 {
		return an.uf("eq", smt.Bool, &gap{why: "comparing collections built by loops over the input", at: at}, x, y)
	}
	switch x.kind {
	case kArray:
		if eq, ok := an.eqOrdered(x, y); ok {
			return eq
		}
		px, py := positions(b, x), positions(b, y)
		out := []*smt.Term{b.Eq(an.count(x, s), an.count(y, s))}
		for i, e := range x.elems {
			for j, f := range y.elems {
				out = append(out, b.Implies(b.And(e.g, f.g, b.Eq(px[i], py[j])), an.eqVals(e.v, f.v, s, at)))
			}
		}
		return b.And(out...)
	}
	return b.And(an.subset(x, y, s, at), an.subset(y, x, s, at))
}

// sameColl reports whether two collections are made of the same members
// under the same guards.
func sameColl(x, y *coll) bool {
	if x == y {
		return true
	}
	if x.kind != y.kind || len(x.elems) != len(y.elems) || len(x.q) != len(y.q) {
		return false
	}
	for i, e := range x.elems {
		f := y.elems[i]
		if e.g != f.g || !sameVal(e.v, f.v) || (e.key != nil) != (f.key != nil) || (e.key != nil && !sameVal(e.key, f.key)) {
			return false
		}
	}
	return slices.Equal(x.q, y.q)
}

func sameVal(x, y val) bool {
	cx, ok1 := x.(*coll)
	cy, ok2 := y.(*coll)
	if ok1 && ok2 {
		return sameColl(cx, cy)
	}
	if ok1 || ok2 {
		return false
	}
	return valKey(x) == valKey(y)
}

// eqOrdered compares two arrays of distinct constants that list the
// constants they share in the same order (a sorted set's codes, in both
// revisions): the arrays are equal exactly when the same constants are
// present, which needs no positions.
func (an *analysis) eqOrdered(x, y *coll) (*smt.Term, bool) {
	b := an.vs.b
	index := func(c *coll) (map[string]int, []string, map[string]*smt.Term, bool) {
		idx := map[string]int{}
		var order []string
		present := map[string]*smt.Term{}
		for _, e := range c.elems {
			v, ok := e.v.(conc)
			if !ok {
				return nil, nil, nil, false
			}
			k := v.t.String()
			if _, dup := idx[k]; dup {
				return nil, nil, nil, false
			}
			idx[k] = len(order)
			order = append(order, k)
			present[k] = e.g
		}
		return idx, order, present, true
	}
	ix, ox, px, ok1 := index(x)
	iy, oy, py, ok2 := index(y)
	if !ok1 || !ok2 {
		return nil, false
	}
	// The shared constants must come in one order in both.
	last := -1
	for _, k := range ox {
		if j, ok := iy[k]; ok {
			if j < last {
				return nil, false
			}
			last = j
		}
	}
	var out []*smt.Term
	for _, k := range ox {
		if g, ok := py[k]; ok {
			out = append(out, b.Eq(px[k], g))
		} else {
			out = append(out, b.Not(px[k]))
		}
	}
	for _, k := range oy {
		if _, ok := ix[k]; !ok {
			out = append(out, b.Not(py[k]))
		}
	}
	return b.And(out...), true
}

// positions is, per member of an array, its index were it present.
func positions(b *smt.Builder, c *coll) []*smt.Term {
	out := make([]*smt.Term, len(c.elems))
	pos := b.IntLit(0)
	for i, e := range c.elems {
		out[i] = pos
		pos = b.Add(smt.Int, pos, b.Ite(e.g, b.IntLit(1), b.IntLit(0)))
	}
	return out
}

// subset is "every member of set (or object) x is one of y".
func (an *analysis) subset(x, y *coll, s int, at string) *smt.Term {
	b := an.vs.b
	var out []*smt.Term
	for _, e := range x.elems {
		var in []*smt.Term
		for _, f := range y.elems {
			same := []*smt.Term{f.g}
			if x.kind == kObject {
				same = append(same, an.eqVals(e.key, f.key, s, at))
			}
			in = append(in, b.And(append(same, an.eqVals(e.v, f.v, s, at))...))
		}
		out = append(out, b.Implies(e.g, b.Or(in...)))
	}
	return b.And(out...)
}

// eqCollVal compares a collection the policy built with a value of
// another kind (a scalar, a node of the input).
func (an *analysis) eqCollVal(c *coll, y val, s int, at string) *smt.Term {
	b := an.vs.b
	n, isNode := y.(*node)
	if !isNode {
		return b.False() // a scalar
	}
	n.touch()
	n.t.sized = true
	x := an.m.x(n)
	m := n.t.mask[s]
	if len(c.q) > 0 {
		return an.uf("eq", smt.Bool, &gap{why: "comparing a collection built by a loop with the input", at: at}, c, y)
	}
	switch c.kind {
	case kArray:
		if !m.has(mArr) {
			return b.False()
		}
		out := []*smt.Term{an.vs.is("varr", x), b.Eq(an.vs.field("va", smt.Int, x), an.count(c, s))}
		for i, pos := range positions(b, c) {
			e := an.m.at(n, pos)
			an.elementRead(e)
			out = append(out, b.Implies(c.elems[i].g, an.eqVals(c.elems[i].v, e, s, at)))
		}
		return b.And(out...)
	case kObject:
		if !m.has(mObj) {
			return b.False()
		}
		out := []*smt.Term{an.vs.is("vobj", x), b.Eq(an.vs.field("vo", smt.Int, x), an.count(c, s))}
		for _, e := range c.elems {
			ks, isStr := constString(e.key)
			if !isStr {
				return an.uf("eq", smt.Bool, &gap{why: "comparing an object with non-constant keys with the input", at: at}, c, y)
			}
			mem := an.m.member(n, ks)
			out = append(out, b.Implies(e.g, b.And(an.m.d(mem), an.eqVals(e.v, mem, s, at))))
		}
		return b.And(out...)
	}
	return b.False() // the input holds no sets
}

// cmpVals is Rego's order (ast.Compare) of two values, as op: <, <=, >, >=.
func (an *analysis) cmpVals(op string, x, y val, s int, at string) *smt.Term {
	vs, b := an.vs, an.vs.b
	if cx, ok := x.(conc); ok {
		if cy, ok := y.(conc); ok {
			c := ast.Compare(cx.t, cy.t)
			return b.BoolLit(map[string]bool{"<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op])
		}
	}
	tx, mx, okx := an.vterm(x, s)
	ty, my, oky := an.vterm(y, s)
	if !okx || !oky {
		g := &gap{why: "ordering collections", at: at}
		return an.uf("cmp"+op, smt.Bool, g, x, y)
	}
	if op == ">" || op == ">=" {
		tx, ty, mx, my, x, y = ty, tx, my, mx, y, x
		op = map[string]string{">": "<", ">=": "<="}[op]
	}
	strict := op == "<"
	both := (mx & my) &^ mFrac
	// Within one kind: only the kinds both sides may hold.
	within := b.BoolLit(!strict) // null, or both the same collection
	if (mx & my & mColl) != 0 {
		within = an.uf("cmp"+op, smt.Bool, &gap{why: "ordering collections", at: at}, x, y)
	}
	if both.has(mBool) {
		bl := b.Implies(vs.bl(tx), vs.bl(ty))
		if strict {
			bl = b.And(b.Not(vs.bl(tx)), vs.bl(ty))
		}
		within = b.Ite(vs.is("vbool", tx), bl, within)
	}
	if both.has(mStr) {
		str := b.App("str.<=", smt.Bool, vs.str(tx), vs.str(ty))
		if strict {
			str = b.App("str.<", smt.Bool, vs.str(tx), vs.str(ty))
		}
		if both == mStr {
			within = str
		} else {
			within = b.Ite(vs.is("vstr", tx), str, within)
		}
	}
	if both.has(mNum) {
		num := b.Cmp(op, vs.num(tx), vs.num(ty))
		if mx.has(mFrac) && my.has(mFrac) {
			num = b.Ite(an.bothFrac(tx, ty), an.uf("cmpf"+op, smt.Bool, &gap{why: "ordering two numbers that may both have a fraction (OPA compares them as float64)", at: at}, x, y), num)
		}
		if both == mNum {
			within = num
		} else {
			within = b.Ite(vs.is("vnum", tx), num, within)
		}
	}
	if mx&^mFrac == my&^mFrac && bits.OnesCount16(uint16(mx&^mFrac)) == 1 {
		return within // one kind on both sides
	}
	rx, ry := vs.rank(tx), vs.rank(ty)
	return b.Ite(b.Eq(rx, ry), within, b.Cmp("<", rx, ry))
}

// intOf reads an integer constant.
func intOf(v val) (*big.Int, bool) {
	c, ok := v.(conc)
	if !ok {
		return nil, false
	}
	n, ok := c.t.Value.(ast.Number)
	if !ok {
		return nil, false
	}
	r, ok := ratOf(n)
	if !ok || !r.IsInt() {
		return nil, false
	}
	return r.Num(), true
}
