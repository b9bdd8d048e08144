package diff

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// The symbolic evaluator runs a revision's Rego over every input at once.
// Each input field the policies read is a node of the domain with a finite
// list of candidate values, one choice variable each; every value the
// evaluator handles is a list of alternatives, each a concrete value
// guarded by a formula over those variables. Rule bodies run as worlds
// (a guard and concrete bindings), so each builtin runs concretely, on
// OPA's own implementation. Two kinds of values are not concrete: an
// input object whose members are nodes of their own (a shell), and a
// collection whose members are present under guards (a partial set rule,
// the arrays made from it). What the evaluator does not model it records
// as a gap, and a gap turns a verdict none into unknown.

// val is one value: exactly one of its fields is set.
type val struct {
	t      *ast.Term
	shell  *node  // an input object, its members nodes of the domain
	coll   *gcoll // a collection whose members are guarded
	obj    *gobj  // an object literal whose members have alternatives
	opaque bool   // the index of a guarded array element: not a value
	taint  bool   // t derives from the input
	count  bool   // t is the count of an input collection
	whole  bool   // t is an input array or object read whole (a candidate)
}

type gcoll struct {
	set   bool
	elems []gelem
}

type gelem struct {
	g F
	t *ast.Term
}

type gobj struct {
	keys []*ast.Term
	vals [][]alt
}

type alt struct {
	g F
	v val
}

// res is one result of evaluating a term in a world: its guard, value and
// the variables it bound (iteration).
type res struct {
	g    F
	v    val
	bind map[ast.Var]val
}

type world struct {
	g   F
	env map[ast.Var]val
}

func (w world) with(g F, bind map[ast.Var]val, b *builder) (world, bool) {
	nw := world{g: b.and(w.g, g), env: w.env}
	if nw.g == False {
		return nw, false
	}
	if len(bind) > 0 {
		nw.env = make(map[ast.Var]val, len(w.env)+len(bind))
		for k, v := range w.env {
			nw.env[k] = v
		}
		for k, v := range bind {
			nw.env[k] = v
		}
	}
	return nw, true
}

type interp struct {
	ctx  context.Context
	c    *ast.Compiler
	data ast.Value
	b    *builder
	dom  *domain
	memo map[string][]alt
	gaps map[string]bool
}

func (in *interp) gap(loc *ast.Location, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if loc != nil {
		msg = fmt.Sprintf("%s:%d: %s", loc.File, loc.Row, msg)
	}
	in.gaps[msg] = true
}

// rule evaluates the rules at ref (no arguments), once per revision.
func (in *interp) rule(ref ast.Ref, loc *ast.Location) []alt {
	key := ref.String()
	if a, ok := in.memo[key]; ok {
		return a
	}
	in.memo[key] = nil // Rego has no recursion; a cycle would be a compile error
	rules := in.c.GetRulesExact(ref)
	var out []alt
	switch {
	case len(rules) == 0:
	case rules[0].Head.RuleKind() == ast.MultiValue:
		out = in.partialSet(rules)
	case rules[0].Head.Key != nil && rules[0].Head.Value != nil && len(rules[0].Head.Ref()) > len(ref):
		in.gap(loc, "partial object rule %s is not modelled", key)
	default:
		out = in.complete(rules)
	}
	in.memo[key] = out
	return out
}

func (in *interp) root() world { return world{g: True, env: map[ast.Var]val{}} }

func (in *interp) partialSet(rules []*ast.Rule) []alt {
	c := &gcoll{set: true}
	for _, r := range rules {
		for _, w := range in.body(in.root(), r.Body) {
			for _, k := range in.term(w, r.Head.Key) {
				if k.v.t == nil || !k.v.t.IsGround() {
					in.gap(r.Location, "a set rule whose element is not a concrete value is not modelled")
					continue
				}
				c.add(in.b, in.b.and(w.g, k.g), k.v.t)
			}
		}
	}
	return []alt{{g: True, v: val{coll: c}}}
}

func (c *gcoll) add(b *builder, g F, t *ast.Term) {
	if c.set {
		for i := range c.elems {
			if c.elems[i].t.Equal(t) {
				c.elems[i].g = b.or(c.elems[i].g, g)
				return
			}
		}
	}
	c.elems = append(c.elems, gelem{g: g, t: t})
}

func (in *interp) complete(rules []*ast.Rule) []alt {
	var out []alt
	defined := False
	var def *ast.Rule
	values := 0
	for _, r := range rules {
		if r.Default {
			def = r
			continue
		}
		values++
		rest := True // the else branches apply where the bodies before did not
		for e := r; e != nil; e = e.Else {
			got := False
			for _, w := range in.body(world{g: rest, env: map[ast.Var]val{}}, e.Body) {
				got = in.b.or(got, w.g)
				for _, v := range in.term(w, e.Head.Value) {
					out = append(out, alt{g: in.b.and(w.g, v.g), v: v.v})
				}
			}
			defined = in.b.or(defined, got)
			rest = in.b.and(rest, in.b.not(got))
		}
	}
	if values > 1 && !sameConcrete(out) {
		in.gap(rules[0].Location, "rule %s has several definitions that may disagree (a conflict is an error)", rules[0].Head.Ref())
	}
	if def != nil {
		for _, v := range in.term(in.root(), def.Head.Value) {
			out = append(out, alt{g: in.b.and(in.b.not(defined), v.g), v: v.v})
		}
	}
	return merge(in.b, out)
}

func sameConcrete(as []alt) bool {
	for _, a := range as {
		if a.v.t == nil || !a.v.t.Equal(as[0].v.t) {
			return false
		}
	}
	return true
}

// merge joins the alternatives holding the same concrete value.
func merge(b *builder, as []alt) []alt {
	var out []alt
	for _, a := range as {
		if a.g == False {
			continue
		}
		i := -1
		if a.v.t != nil {
			for j := range out {
				if out[j].v.t != nil && out[j].v.taint == a.v.taint && out[j].v.count == a.v.count && out[j].v.whole == a.v.whole && out[j].v.t.Equal(a.v.t) {
					i = j
					break
				}
			}
		}
		if i < 0 {
			out = append(out, a)
			continue
		}
		out[i].g = b.or(out[i].g, a.g)
	}
	return out
}

// body runs the expressions of a body from w and returns the worlds in
// which it succeeds; worlds with the same bindings are joined.
func (in *interp) body(w world, body ast.Body) []world {
	if in.ctx.Err() != nil {
		return nil // cancelled: Run returns the context's error, not this
	}
	ws := []world{w}
	for _, e := range body {
		var next []world
		for _, w := range ws {
			next = append(next, in.expr(w, e)...)
		}
		ws = joinWorlds(in.b, next)
		if len(ws) == 0 {
			break
		}
	}
	return ws
}

func joinWorlds(b *builder, ws []world) []world {
	if len(ws) < 2 {
		return ws
	}
	idx := map[string]int{}
	var out []world
	for _, w := range ws {
		k := envKey(w.env)
		if i, ok := idx[k]; ok {
			out[i].g = b.or(out[i].g, w.g)
			continue
		}
		idx[k] = len(out)
		out = append(out, w)
	}
	return out
}

func envKey(env map[ast.Var]val) string {
	keys := make([]string, 0, len(env))
	for k, v := range env {
		var s string
		switch {
		case v.t != nil:
			s = fmt.Sprintf("t%v%v%v:%s", v.taint, v.count, v.whole, v.t.String())
		default:
			s = fmt.Sprintf("p%p%p%p%p%v", v.shell, v.coll, v.obj, &v, v.opaque)
		}
		keys = append(keys, string(k)+"="+s)
	}
	sort.Strings(keys)
	return strings.Join(keys, "\x00")
}

func (in *interp) expr(w world, e *ast.Expr) []world {
	if len(e.With) > 0 {
		in.gap(e.Location, "`with` is not modelled")
		return nil
	}
	if e.Negated {
		pos := e.Copy()
		pos.Negated = false
		got := False
		for _, sw := range in.expr(world{g: True, env: w.env}, pos) {
			got = in.b.or(got, sw.g)
		}
		nw, ok := w.with(in.b.not(got), nil, in.b)
		if !ok {
			return nil
		}
		return []world{nw}
	}
	var rs []res
	switch t := e.Terms.(type) {
	case *ast.SomeDecl:
		return []world{w}
	case *ast.Every:
		in.gap(e.Location, "`every` is not modelled")
		return nil
	case *ast.Term:
		rs = in.termRes(w, t)
	case []*ast.Term:
		rs = in.call(w, e, t)
	}
	var out []world
	for _, r := range rs {
		if r.v.t != nil && r.v.t.Value.Compare(ast.Boolean(false)) == 0 {
			continue
		}
		if nw, ok := w.with(r.g, r.bind, in.b); ok {
			out = append(out, nw)
		}
	}
	return out
}

// term evaluates a term that binds nothing.
func (in *interp) term(w world, t *ast.Term) []alt {
	var out []alt
	for _, r := range in.termRes(w, t) {
		if len(r.bind) > 0 {
			in.gap(t.Location, "a value that iterates is not modelled here")
			continue
		}
		out = append(out, alt{g: in.b.and(w.g, r.g), v: r.v})
	}
	return out
}

func one(v val) []res { return []res{{g: True, v: v}} }

func (in *interp) termRes(w world, t *ast.Term) []res {
	switch x := t.Value.(type) {
	case ast.Null, ast.Boolean, ast.Number, ast.String:
		return one(val{t: t})
	case ast.Var:
		if v, ok := w.env[x]; ok {
			if v.opaque {
				in.gap(t.Location, "the position of an element of a guarded array is not modelled")
				return nil
			}
			return one(v)
		}
		in.gap(t.Location, "unbound variable %s", x)
		return nil
	case ast.Ref:
		return in.ref(w, x, t.Location)
	case *ast.Array:
		return in.composite(w, t, x.Len(), func(i int) *ast.Term { return x.Elem(i) }, func(ts []*ast.Term) *ast.Term { return ast.ArrayTerm(ts...) })
	case ast.Set:
		el := x.Slice()
		return in.composite(w, t, len(el), func(i int) *ast.Term { return el[i] }, func(ts []*ast.Term) *ast.Term { return ast.SetTerm(ts...) })
	case ast.Object:
		return in.object(w, t, x)
	case *ast.ArrayComprehension:
		return one(val{coll: in.comprehension(w, x.Term, x.Body, false)})
	case *ast.SetComprehension:
		return one(val{coll: in.comprehension(w, x.Term, x.Body, true)})
	case ast.Call:
		in.gap(t.Location, "a nested call is not modelled")
		return nil
	}
	in.gap(t.Location, "term %v is not modelled", t)
	return nil
}

func (in *interp) comprehension(w world, head *ast.Term, body ast.Body, set bool) *gcoll {
	c := &gcoll{set: set}
	for _, bw := range in.body(world{g: True, env: w.env}, body) {
		for _, h := range in.term(bw, head) {
			if h.v.t == nil {
				in.gap(head.Location, "a comprehension of values that are not concrete is not modelled")
				continue
			}
			c.add(in.b, h.g, h.v.t)
		}
	}
	return c
}

// composite evaluates an array or set literal: the product of its
// elements' alternatives.
func (in *interp) composite(w world, t *ast.Term, n int, elem func(int) *ast.Term, mk func([]*ast.Term) *ast.Term) []res {
	type part struct {
		g     F
		ts    []*ast.Term
		taint bool
	}
	parts := []part{{g: True}}
	for i := 0; i < n; i++ {
		as := in.term(w, elem(i))
		var next []part
		for _, p := range parts {
			for _, a := range as {
				if a.v.t == nil {
					if a.v.shell != nil {
						// An input object inside a literal: the literal is
						// compared or searched whole, which the shell cannot be.
						in.gap(t.Location, "an input object inside a literal is not modelled")
					} else {
						in.gap(t.Location, "a literal holding a value that is not concrete is not modelled")
					}
					continue
				}
				g := in.b.and(p.g, a.g)
				if g == False {
					continue
				}
				next = append(next, part{g: g, ts: append(append([]*ast.Term(nil), p.ts...), a.v.t), taint: p.taint || a.v.taint})
			}
		}
		parts = next
		if len(parts) > 4096 {
			in.gap(t.Location, "a literal with too many alternatives")
			return nil
		}
	}
	out := make([]res, 0, len(parts))
	for _, p := range parts {
		out = append(out, res{g: p.g, v: val{t: mk(p.ts), taint: p.taint}})
	}
	return out
}

func (in *interp) object(w world, t *ast.Term, x ast.Object) []res {
	o := &gobj{}
	for _, k := range x.Keys() {
		if !k.IsGround() {
			in.gap(t.Location, "an object literal with a computed key is not modelled")
			return nil
		}
		o.keys = append(o.keys, k)
		o.vals = append(o.vals, in.term(w, x.Get(k)))
	}
	return one(val{obj: o})
}

// ref evaluates a reference: into the input, into data (rules and base
// documents) or into a local value.
func (in *interp) ref(w world, ref ast.Ref, loc *ast.Location) []res {
	head, _ := ref[0].Value.(ast.Var)
	switch {
	case head.Equal(ast.InputRootDocument.Value):
		return in.index(w, []res{{g: True, v: val{shell: in.dom.root}}}, ref[1:], loc)
	case head.Equal(ast.DefaultRootDocument.Value):
		for i := 2; i <= len(ref); i++ {
			if !ref[:i].IsGround() {
				break
			}
			if len(in.c.GetRulesExact(ref[:i])) > 0 {
				if fn := in.c.GetRulesExact(ref[:i])[0]; len(fn.Head.Args) > 0 {
					in.gap(loc, "a function referenced as a value is not modelled")
					return nil
				}
				var rs []res
				for _, a := range in.rule(ref[:i], loc) {
					rs = append(rs, res{g: a.g, v: a.v})
				}
				return in.index(w, rs, ref[i:], loc)
			}
		}
		if len(in.c.GetRules(ref)) > 0 {
			in.gap(loc, "a reference to a package's rules as a whole is not modelled")
			return nil
		}
		return in.index(w, one(val{t: ast.NewTerm(in.data)}), ref[1:], loc)
	default:
		v, ok := w.env[head]
		if !ok {
			in.gap(loc, "unbound variable %s", head)
			return nil
		}
		if v.opaque {
			in.gap(loc, "the position of an element of a guarded array is not modelled")
			return nil
		}
		return in.index(w, one(v), ref[1:], loc)
	}
}

func (in *interp) index(w world, rs []res, ops ast.Ref, loc *ast.Location) []res {
	for _, op := range ops {
		var next []res
		for _, r := range rs {
			next = append(next, in.step(w, r, op, loc)...)
		}
		rs = next
	}
	return rs
}

// step indexes one result by one operand of a reference.
func (in *interp) step(w world, r res, op *ast.Term, loc *ast.Location) []res {
	var v ast.Var
	iterate := false
	var keys []alt
	switch x := op.Value.(type) {
	case ast.Var:
		if b, ok := w.env[x]; ok {
			keys = []alt{{g: True, v: b}}
		} else if b, ok := r.bind[x]; ok {
			keys = []alt{{g: True, v: b}}
		} else {
			v, iterate = x, true
		}
	default:
		keys = in.term(w, op)
	}
	extend := func(g F, nv val, bv *ast.Var, bval val) (res, bool) {
		g = in.b.and(r.g, g)
		if g == False {
			return res{}, false
		}
		bind := r.bind
		if bv != nil {
			bind = make(map[ast.Var]val, len(r.bind)+1)
			for k, x := range r.bind {
				bind[k] = x
			}
			bind[*bv] = bval
		}
		return res{g: g, v: nv, bind: bind}, true
	}
	var out []res
	add := func(g F, nv val, bv *ast.Var, bval val) {
		if x, ok := extend(g, nv, bv, bval); ok {
			out = append(out, x)
		}
	}
	switch {
	case r.v.shell != nil:
		if iterate {
			in.gap(loc, "iterating over the input at %s is not modelled", r.v.shell.pointer())
			return nil
		}
		for _, k := range keys {
			s, ok := k.v.t.Value.(ast.String)
			if k.v.t == nil || !ok {
				in.gap(loc, "a computed key into the input is not modelled")
				continue
			}
			child := r.v.shell.children[string(s)]
			if child == nil {
				// Read through a variable: the domain has no candidates for it.
				in.gap(loc, "reading %s/%s through a variable is not modelled", r.v.shell.pointer(), s)
				continue
			}
			for _, c := range child.choices {
				if c.absent {
					continue
				}
				nv := val{shell: child}
				if !c.shell {
					nv = val{t: c.t, taint: true, whole: !ast.IsScalar(c.t.Value)}
				}
				add(in.b.and(k.g, c.v), nv, nil, val{})
			}
		}
	case r.v.coll != nil:
		c := r.v.coll
		if iterate {
			for _, e := range c.elems {
				key := val{opaque: true}
				if c.set {
					key = val{t: e.t}
				}
				add(e.g, val{t: e.t}, &v, key)
			}
			return out
		}
		for _, k := range keys {
			if k.v.t == nil {
				continue
			}
			if c.set {
				for _, e := range c.elems {
					if e.t.Equal(k.v.t) {
						add(in.b.and(k.g, e.g), val{t: e.t}, nil, val{})
					}
				}
				continue
			}
			n, ok := k.v.t.Value.(ast.Number)
			pos, isInt := n.Int()
			if !ok || !isInt || pos < 0 {
				continue
			}
			counts := prefixCounts(in.b, c.elems)
			for i, e := range c.elems {
				add(in.b.and(k.g, in.b.and(e.g, at(counts, i, pos))), val{t: e.t}, nil, val{})
			}
		}
	case r.v.obj != nil:
		if iterate {
			in.gap(loc, "iterating over an object literal is not modelled")
			return nil
		}
		for _, k := range keys {
			for i, ok := range r.v.obj.keys {
				if k.v.t != nil && ok.Equal(k.v.t) {
					for _, a := range r.v.obj.vals[i] {
						add(in.b.and(k.g, a.g), a.v, nil, val{})
					}
				}
			}
		}
	case r.v.t != nil:
		if iterate {
			if r.v.taint {
				in.gap(loc, "iterating over an input collection is not modelled (bounded by its candidate values)")
			}
			switch c := r.v.t.Value.(type) {
			case *ast.Array:
				for i := 0; i < c.Len(); i++ {
					add(True, val{t: c.Elem(i), taint: r.v.taint}, &v, val{t: ast.IntNumberTerm(i), taint: r.v.taint})
				}
			case ast.Object:
				c.Foreach(func(k, x *ast.Term) { add(True, val{t: x, taint: r.v.taint}, &v, val{t: k, taint: r.v.taint}) })
			case ast.Set:
				c.Foreach(func(x *ast.Term) { add(True, val{t: x, taint: r.v.taint}, &v, val{t: x, taint: r.v.taint}) })
			}
			return out
		}
		for _, k := range keys {
			if k.v.t == nil {
				continue
			}
			if k.v.taint {
				in.gap(loc, "indexing by an input value is not modelled")
			}
			if x, err := r.v.t.Value.Find(ast.Ref{k.v.t}); err == nil {
				if r.v.taint {
					// Only the candidates' members: the domain has no
					// field for what is read through a variable.
					in.gap(loc, "reading into an input value held whole (through a variable) is not modelled")
				}
				add(k.g, val{t: ast.NewTerm(x), taint: r.v.taint}, nil, val{})
			}
		}
	}
	return out
}

// prefixCounts returns, for each i, the formulas "exactly k of elems[:i]
// are present" for k from 0 to i.
func prefixCounts(b *builder, elems []gelem) [][]F {
	out := [][]F{{True}}
	for _, e := range elems {
		counts := out[len(out)-1]
		next := make([]F, len(counts)+1)
		for k := range next {
			var stay, grow F = False, False
			if k < len(counts) {
				stay = b.and(counts[k], b.not(e.g))
			}
			if k > 0 {
				grow = b.and(counts[k-1], e.g)
			}
			next[k] = b.or(stay, grow)
		}
		out = append(out, next)
	}
	return out
}

// at is the formula "exactly k of the first i elements are present".
func at(counts [][]F, i, k int) F {
	if k >= len(counts[i]) {
		return False
	}
	return counts[i][k]
}

// modelled lists the builtins whose application to input values the
// candidate values represent exactly (see domain.go).
var modelled = map[string]bool{
	"equal": true, "neq": true, "lt": true, "gt": true, "lte": true, "gte": true,
	"plus": true, "minus": true, "count": true, "internal.member_2": true,
	"is_number": true, "is_string": true, "is_boolean": true, "is_null": true,
	"is_array": true, "is_object": true, "is_set": true, "type_name": true,
}

func (in *interp) call(w world, e *ast.Expr, terms []*ast.Term) []res {
	opRef, ok := terms[0].Value.(ast.Ref)
	if !ok {
		in.gap(e.Location, "a dynamic call is not modelled")
		return nil
	}
	name := opRef.String()
	args := terms[1:]
	if name == ast.Equality.Name {
		return in.unifyExpr(w, args[0], args[1])
	}
	if bi, ok := ast.BuiltinMap[name]; ok {
		nargs := len(bi.Decl.FuncArgs().Args)
		return in.builtin(w, e, name, args[:min(nargs, len(args))], outArg(args, nargs))
	}
	rules := in.c.GetRulesExact(opRef)
	if len(rules) == 0 || len(rules[0].Head.Args) == 0 {
		in.gap(e.Location, "call of %s is not modelled", name)
		return nil
	}
	nargs := len(rules[0].Head.Args)
	return in.function(w, e, rules, args[:min(nargs, len(args))], outArg(args, nargs))
}

func outArg(args []*ast.Term, n int) *ast.Term {
	if len(args) > n {
		return args[n]
	}
	return nil
}

// products evaluates the arguments and returns every combination.
func (in *interp) products(w world, args []*ast.Term) []res {
	type combo struct {
		g  F
		vs []val
	}
	cs := []combo{{g: True}}
	for _, a := range args {
		as := in.term(world{g: True, env: w.env}, a)
		var next []combo
		for _, c := range cs {
			for _, x := range as {
				g := in.b.and(c.g, x.g)
				if g != False {
					next = append(next, combo{g: g, vs: append(append([]val(nil), c.vs...), x.v)})
				}
			}
		}
		cs = next
	}
	out := make([]res, len(cs))
	for i, c := range cs {
		out[i] = res{g: c.g, v: val{obj: &gobj{vals: [][]alt{vlist(c.vs)}}}}
	}
	return out
}

func vlist(vs []val) []alt {
	out := make([]alt, len(vs))
	for i, v := range vs {
		out[i] = alt{g: True, v: v}
	}
	return out
}

func (in *interp) builtin(w world, e *ast.Expr, name string, args []*ast.Term, out *ast.Term) []res {
	var rs []res
	for _, p := range in.products(w, args) {
		vs := make([]val, len(p.v.obj.vals[0]))
		taint := false
		for i, a := range p.v.obj.vals[0] {
			vs[i] = a.v
			taint = taint || a.v.taint || a.v.count
		}
		for _, r := range in.apply(e, name, vs) {
			r.g = in.b.and(p.g, r.g)
			if r.g == False {
				continue
			}
			r.v.taint = r.v.taint || (taint && !r.v.count)
			rs = append(rs, r)
		}
	}
	if out == nil {
		return rs
	}
	var bound []res
	for _, r := range rs {
		bound = append(bound, in.unifyVal(w, out, r)...)
	}
	return bound
}

// apply runs one builtin on one combination of argument values.
func (in *interp) apply(e *ast.Expr, name string, vs []val) []res {
	tainted := false
	for _, v := range vs {
		tainted = tainted || v.taint || v.count
	}
	if tainted && !modelled[name] {
		in.gap(e.Location, "%s applied to input values is not modelled (its examples are searched, never proved absent)", name)
	}
	if tainted {
		in.checkCount(e, name, vs)
		for i, v := range vs {
			if !v.whole || name == "count" || strings.HasPrefix(name, "is_") || name == "type_name" {
				continue
			}
			// Its candidates are empty or a fixture's value: only its kind,
			// its size and its inequality to a scalar are covered.
			if (name == "equal" || name == "neq") && len(vs) == 2 && vs[1-i].t != nil && ast.IsScalar(vs[1-i].t.Value) {
				continue
			}
			in.gap(e.Location, "%s of an input collection is not modelled", name)
		}
		if name == "lt" || name == "gt" || name == "lte" || name == "gte" {
			for _, v := range vs {
				if _, isNum := v.t.Value.(ast.Number); v.t != nil && !isNum {
					in.gap(e.Location, "%s on input values that are not numbers is not modelled", name)
				}
			}
		}
	}
	// Values that are not concrete.
	for i, v := range vs {
		switch {
		case v.coll != nil:
			return in.applyColl(e, name, vs, i)
		case v.shell != nil:
			return in.applyShell(e, name, vs, i)
		case v.obj != nil:
			t, ok := concreteObj(v.obj)
			if !ok {
				in.gap(e.Location, "%s of an object whose members vary is not modelled", name)
				return nil
			}
			vs[i] = val{t: t, taint: v.taint}
		case v.t == nil:
			in.gap(e.Location, "%s of a value that is not concrete", name)
			return nil
		}
	}
	ops := make([]*ast.Term, len(vs))
	for i, v := range vs {
		ops[i] = v.t
	}
	var result *ast.Term
	f := topdown.GetBuiltin(name)
	if f == nil {
		in.gap(e.Location, "builtin %s has no implementation here", name)
		return nil
	}
	err := f(topdown.BuiltinContext{Context: in.ctx}, ops, func(t *ast.Term) error { result = t; return nil })
	if err != nil {
		// The engine runs with strict builtin errors: an error is a
		// policy_error (a refusal), which the formulas do not carry.
		in.gap(e.Location, "%s fails on some candidate values (an error refuses; not modelled)", name)
		return nil
	}
	if result == nil {
		return nil
	}
	return one(val{t: result, count: name == "count" && tainted})
}

// checkCount holds the count of an input collection to the comparisons
// its candidates (0 or 1 element) decide exactly: with 0, and < 1 / >= 1.
func (in *interp) checkCount(e *ast.Expr, name string, vs []val) {
	if len(vs) != 2 || (!vs[0].count && !vs[1].count) {
		return
	}
	for _, v := range vs {
		if v.count || v.t == nil {
			continue
		}
		n, ok := v.t.Value.(ast.Number)
		k, isInt := n.Int()
		switch {
		case ok && isInt && k == 0 && name != "plus" && name != "minus":
			return
		case ok && isInt && k == 1 && ((vs[0].count && (name == "lt" || name == "gte")) || (vs[1].count && (name == "gt" || name == "lte"))):
			return
		}
	}
	in.gap(e.Location, "%s on the count of an input collection is modelled only against 0 (collections of at most 1 item)", name)
}

func concreteObj(o *gobj) (*ast.Term, bool) {
	var kvs [][2]*ast.Term
	for i, k := range o.keys {
		if len(o.vals[i]) != 1 || o.vals[i][0].g != True || o.vals[i][0].v.t == nil {
			return nil, false
		}
		kvs = append(kvs, [2]*ast.Term{k, o.vals[i][0].v.t})
	}
	return ast.ObjectTerm(kvs...), true
}

func (in *interp) applyColl(e *ast.Expr, name string, vs []val, i int) []res {
	c := vs[i].coll
	switch {
	case name == "count" && len(vs) == 1:
		var out []res
		counts := prefixCounts(in.b, c.elems)
		for k := 0; k <= len(c.elems); k++ {
			out = append(out, res{g: at(counts, len(c.elems), k), v: val{t: ast.IntNumberTerm(k)}})
		}
		return out
	case name == "sort" && len(vs) == 1:
		s := &gcoll{elems: append([]gelem(nil), c.elems...)}
		sort.SliceStable(s.elems, func(a, b int) bool { return s.elems[a].t.Value.Compare(s.elems[b].t.Value) < 0 })
		return one(val{coll: s})
	case name == "internal.member_2" && i == 1 && vs[0].t != nil:
		g := False
		for _, el := range c.elems {
			if el.t.Equal(vs[0].t) {
				g = in.b.or(g, el.g)
			}
		}
		return []res{{g: g, v: val{t: ast.BooleanTerm(true)}}, {g: in.b.not(g), v: val{t: ast.BooleanTerm(false)}}}
	}
	in.gap(e.Location, "%s of a collection whose members are conditional is not modelled", name)
	return nil
}

func (in *interp) applyShell(e *ast.Expr, name string, vs []val, i int) []res {
	other := vs[1-i%2]
	if len(vs) == 2 && (name == "equal" || name == "neq") && other.t != nil && !other.taint {
		if _, scalar := other.t.Value.(ast.Object); !scalar {
			return one(val{t: ast.BooleanTerm(name == "neq")})
		}
	}
	if len(vs) == 1 && (name == "is_object" || name == "is_null") {
		return one(val{t: ast.BooleanTerm(name == "is_object")})
	}
	in.gap(e.Location, "%s of the input object %s is not modelled", name, vs[i].shell.pointer())
	return nil
}

// unifyExpr evaluates a = b: one side is evaluated, the other matched.
func (in *interp) unifyExpr(w world, a, b *ast.Term) []res {
	if in.unbound(w, a) {
		a, b = b, a
	}
	if in.unbound(w, a) {
		in.gap(a.Location, "unifying two patterns is not modelled")
		return nil
	}
	var out []res
	for _, r := range in.termRes(w, a) {
		out = append(out, in.unifyVal(w, b, r)...)
	}
	return out
}

// unbound reports whether t is a pattern: a variable w does not bind, or
// an array literal holding one.
func (in *interp) unbound(w world, t *ast.Term) bool {
	switch x := t.Value.(type) {
	case ast.Var:
		_, ok := w.env[x]
		return !ok
	case *ast.Array:
		for i := 0; i < x.Len(); i++ {
			if in.unbound(w, x.Elem(i)) {
				return true
			}
		}
	}
	return false
}

// unifyVal matches pattern p against the value of r, binding p's free
// variables; the result value is true when they match.
func (in *interp) unifyVal(w world, p *ast.Term, r res) []res {
	bind := map[ast.Var]val{}
	for k, v := range r.bind {
		bind[k] = v
	}
	var match func(p *ast.Term, v val) bool
	match = func(p *ast.Term, v val) bool {
		if x, ok := p.Value.(ast.Var); ok {
			if b, ok := w.env[x]; ok {
				return in.equalVals(b, v, p)
			}
			if b, ok := bind[x]; ok {
				return in.equalVals(b, v, p)
			}
			bind[x] = v
			return true
		}
		if arr, ok := p.Value.(*ast.Array); ok && !p.IsGround() {
			t, ok := v.t.Value.(*ast.Array)
			if v.t == nil || !ok || t.Len() != arr.Len() {
				return false
			}
			for i := 0; i < arr.Len(); i++ {
				if !match(arr.Elem(i), val{t: t.Elem(i), taint: v.taint}) {
					return false
				}
			}
			return true
		}
		// A ground pattern: compare values.
		as := in.term(world{g: True, env: w.env}, p)
		if len(as) != 1 || as[0].g != True {
			in.gap(p.Location, "a pattern whose value varies is not modelled")
			return false
		}
		return in.equalVals(as[0].v, v, p)
	}
	if !match(p, r.v) {
		return nil
	}
	return []res{{g: r.g, v: val{t: ast.BooleanTerm(true)}, bind: bind}}
}

func (in *interp) equalVals(a, b val, at *ast.Term) bool {
	if a.t != nil && b.t != nil {
		return a.t.Equal(b.t)
	}
	in.gap(at.Location, "comparing values that are not concrete in a unification is not modelled")
	return false
}

// function evaluates a call of a user function by its definitions.
func (in *interp) function(w world, e *ast.Expr, rules []*ast.Rule, args []*ast.Term, out *ast.Term) []res {
	var rs []res
	for _, p := range in.products(w, args) {
		vs := p.v.obj.vals[0]
		var alts []alt
		defined := False
		for _, r := range rules {
			if r.Default {
				in.gap(r.Location, "a default function is not modelled")
				continue
			}
			for e2 := r; e2 != nil; e2 = e2.Else {
				if e2 != r {
					in.gap(r.Location, "else on a function is not modelled")
					break
				}
				env := map[ast.Var]val{}
				okArgs := true
				for i, a := range e2.Head.Args {
					x, isVar := a.Value.(ast.Var)
					if !isVar {
						in.gap(r.Location, "a function argument pattern is not modelled")
						okArgs = false
						break
					}
					env[x] = vs[i].v
				}
				if !okArgs {
					continue
				}
				for _, bw := range in.body(world{g: True, env: env}, e2.Body) {
					defined = in.b.or(defined, bw.g)
					val := e2.Head.Value
					if val == nil {
						val = ast.BooleanTerm(true)
					}
					for _, v := range in.term(bw, val) {
						alts = append(alts, alt{g: in.b.and(bw.g, v.g), v: v.v})
					}
				}
			}
		}
		alts = merge(in.b, alts)
		if len(rules) > 1 && len(alts) > 1 {
			in.gap(e.Location, "a function with several definitions that may disagree is not modelled")
		}
		for _, a := range alts {
			rs = append(rs, res{g: in.b.and(p.g, a.g), v: a.v})
		}
	}
	if out == nil {
		return rs
	}
	var bound []res
	for _, r := range rs {
		bound = append(bound, in.unifyVal(w, out, r)...)
	}
	return bound
}
