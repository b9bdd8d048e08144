package diff

import (
	"math/big"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// The builtins the encoding models on values of the input, each as OPA's
// implementation behaves: its result and where it fails (a type error is
// an error under strict builtin errors). Any other builtin on such values
// is an uninterpreted function (a gap); on constants, every builtin is
// OPA's own (call.go).

type bcall struct {
	f    *frame
	s    *ir.CallStmt
	args []val
}

type bres struct {
	alts []alt
	err  *smt.Term
	ok   bool
}

func (c *bcall) an() *analysis       { return c.f.sd.an }
func (c *bcall) b() *smt.Builder     { return c.f.sd.an.vs.b }
func (c *bcall) side() int           { return c.f.sd.s }
func (c *bcall) at() string          { return c.f.loc(c.s) }
func (c *bcall) vs() *vals           { return c.f.sd.an.vs }
func (c *bcall) arg(i int) val       { return c.args[i] }
func (c *bcall) gap(why string) *gap { return &gap{why: why, at: c.at()} }

// value is a result that is always there.
func (c *bcall) value(v val, err *smt.Term) bres {
	return bres{alts: []alt{{g: c.b().True(), v: v}}, err: err, ok: true}
}

func (c *bcall) boolean(t *smt.Term) bres {
	return c.value(sym{t: c.vs().boolV(t), m: mBool}, nil)
}

// scalar is an argument as a V term, when it is a scalar or a node.
func (c *bcall) scalar(i int) (*smt.Term, mask, bool) {
	return c.an().vterm(c.args[i], c.side())
}

// coll is an argument that is a collection, the analysis's or a constant
// one; nil when it is neither.
func (c *bcall) coll(i int) *coll {
	switch v := c.arg(i).(type) {
	case *coll:
		return v
	case conc:
		col, _ := c.an().vs.concColl(v.t)
		return col
	}
	return nil
}

// str is an argument that must be a string: its String term, and the
// condition that it is not one.
func (c *bcall) str(i int) (*smt.Term, *smt.Term, bool) {
	t, m, ok := c.scalar(i)
	if !ok {
		return nil, nil, false
	}
	if !m.has(mStr) {
		return c.vs().str(t), c.b().True(), true
	}
	return c.vs().str(t), c.b().Not(c.an().kindIs(c.args[i], mStr, c.side())), true
}

// integer is an argument that must be an integral number: its Int term, and
// the condition that it is not a number; ok is false when it may have a
// fraction (OPA then computes in floating point).
func (c *bcall) integer(i int) (*smt.Term, *smt.Term, bool) {
	t, m, ok := c.scalar(i)
	if !ok || m.has(mFrac) {
		return nil, nil, false
	}
	if !m.has(mNum) {
		return c.b().IntLit(0), c.b().True(), true
	}
	return c.b().App("to_int", smt.Int, c.vs().num(t)), c.b().Not(c.an().kindIs(c.args[i], mNum, c.side())), true
}

// each is get (str, integer) of the first n arguments: their terms, the
// conditions that they fail, and whether all of them have terms (each is
// read even when one before has none).
func (c *bcall) each(n int, get func(int) (*smt.Term, *smt.Term, bool)) ([]*smt.Term, []*smt.Term, bool) {
	ts, errs, all := make([]*smt.Term, n), make([]*smt.Term, n), true
	for i := range n {
		var ok bool
		ts[i], errs[i], ok = get(i)
		all = all && ok
	}
	return ts, errs, all
}

// strFn is a builtin of n strings whose result f computes from their
// terms; it fails when one of them is not a string.
func strFn(n int, f func(c *bcall, s []*smt.Term) val) encoder {
	return func(c *bcall) bres {
		s, errs, ok := c.each(n, c.str)
		if !ok {
			return bres{}
		}
		return c.value(f(c, s), c.b().Or(errs...))
	}
}

func (c *bcall) num(n *smt.Term) val {
	return sym{t: c.vs().numV(c.b().App("to_real", smt.Real, n)), m: mNum}
}

func (c *bcall) strVal(s *smt.Term) val { return sym{t: c.vs().strV(s), m: mStr} }

type encoder func(c *bcall) bres

var builtins map[string]encoder

func init() {
	builtins = map[string]encoder{
		"equal": func(c *bcall) bres { return c.boolean(c.an().eqVals(c.arg(0), c.arg(1), c.side(), c.at())) },
		"neq": func(c *bcall) bres {
			return c.boolean(c.b().Not(c.an().eqVals(c.arg(0), c.arg(1), c.side(), c.at())))
		},
		"lt":                compare("<"),
		"lte":               compare("<="),
		"gt":                compare(">"),
		"gte":               compare(">="),
		"internal.member_2": member2,
		"internal.member_3": member3,
		"count":             count,
		"plus":              arith("+"),
		"minus":             arith("-"),
		"mul":               arith("*"),
		"rem":               rem,
		"abs":               abs,
		"is_number":         kind(mNum),
		"is_string":         kind(mStr),
		"is_boolean":        kind(mBool),
		"is_null":           kind(mNull),
		"is_array":          kind(mArr),
		"is_object":         kind(mObj),
		"is_set":            kind(mSet),
		"type_name":         typeName,
		"startswith":        strPred("str.prefixof", true),
		"endswith":          strPred("str.suffixof", true),
		"contains":          strPred("str.contains", false),
		"indexof":           indexof,
		"trim_prefix":       trim("str.prefixof"),
		"trim_suffix":       trim("str.suffixof"),
		"replace":           replace,
		"concat":            concat,
		"sprintf":           sprintf,
		"format_int":        formatInt,
		"regex.match":       regexMatch,
		"object.get":        objectGet,
		"lower":             caseMap("lower", 'A', 'Z'),
		"upper":             caseMap("upper", 'a', 'z'),
		"sort":              sortColl,
		"array.concat":      arrayConcat,
		"and":               setOp("and"),
		"or":                setOp("or"),
	}
}

func compare(op string) encoder {
	return func(c *bcall) bres { return c.boolean(c.an().cmpVals(op, c.arg(0), c.arg(1), c.side(), c.at())) }
}

func kind(k mask) encoder {
	return func(c *bcall) bres { return c.boolean(c.an().kindIs(c.arg(0), k, c.side())) }
}

func typeName(c *bcall) bres {
	b := c.b()
	names := []struct {
		k    mask
		name string
	}{{mNull, "null"}, {mBool, "boolean"}, {mNum, "number"}, {mStr, "string"}, {mArr, "array"}, {mObj, "object"}, {mSet, "set"}}
	var out []alt
	for _, n := range names {
		out = append(out, alt{g: c.an().kindIs(c.arg(0), n.k, c.side()), v: conc{ast.StringTerm(n.name)}})
	}
	return bres{alts: out, err: b.Not(c.an().kindIs(c.arg(0), mObj, c.side())), ok: true}
}

// member2 is "x in coll": a member (an array's or set's, an object's
// value) equal to x.
func member2(c *bcall) bres {
	an, b := c.an(), c.b()
	x, col := c.arg(0), c.members(1)
	switch v := col.(type) {
	case *coll:
		var out []*smt.Term
		for _, e := range v.elems {
			out = append(out, b.And(e.g, an.eqVals(e.v, x, c.side(), c.at())))
		}
		for _, q := range v.q {
			out = append(out, an.qmember(q, x, c.side(), c.at()))
		}
		return c.boolean(b.Or(out...))
	case *node:
		v.touch()
		xt := an.m.x(v)
		var out []*smt.Term
		if v.t.mask[c.side()].has(mArr) {
			out = append(out, b.And(an.vs.is("varr", xt), an.elemExists(v, c.side(), func(e *node) *smt.Term {
				return an.eqVals(e, x, c.side(), c.at())
			})))
		}
		if v.t.mask[c.side()].has(mObj) {
			out = append(out, b.And(an.vs.is("vobj", xt), an.uf("in", smt.Bool, c.gap("membership in an object of the input"), x, v)))
		}
		return c.boolean(b.Or(out...))
	case sym, conc:
		return c.boolean(b.False())
	}
	return bres{}
}

// members is argument i, a constant collection as a coll (a constant
// scalar as it is).
func (c *bcall) members(i int) val {
	if k, ok := c.arg(i).(conc); ok {
		if cc, ok := c.an().vs.concColl(k.t); ok {
			return cc
		}
	}
	return c.arg(i)
}

// member3 is "k, x in coll".
func member3(c *bcall) bres {
	an, b := c.an(), c.b()
	k, x, col := c.arg(0), c.arg(1), c.members(2)
	if _, scalar := col.(conc); scalar {
		return c.boolean(b.False())
	}
	v, ok := col.(*coll)
	if !ok || len(v.q) > 0 {
		return bres{}
	}
	var out []*smt.Term
	switch v.kind {
	case kArray:
		kt, _, ok := an.vterm(k, c.side())
		if !ok {
			return c.boolean(b.False())
		}
		for i, pos := range positions(b, v) {
			e := v.elems[i]
			out = append(out, b.And(e.g, an.vs.is("vnum", kt), b.Eq(an.vs.num(kt), b.App("to_real", smt.Real, pos)), an.eqVals(e.v, x, c.side(), c.at())))
		}
	case kObject:
		for _, e := range v.elems {
			out = append(out, b.And(e.g, an.eqVals(e.key, k, c.side(), c.at()), an.eqVals(e.v, x, c.side(), c.at())))
		}
	case kSet:
		for _, e := range v.elems {
			out = append(out, b.And(e.g, an.eqVals(e.v, k, c.side(), c.at()), an.eqVals(e.v, x, c.side(), c.at())))
		}
	}
	return c.boolean(b.Or(out...))
}

// count: a collection's members, a string's characters; anything else
// fails.
func count(c *bcall) bres {
	an, b := c.an(), c.b()
	x := c.arg(0)
	var alts []alt
	var ok []*smt.Term
	if n, has := an.length(x, c.side()); has != nil {
		alts = append(alts, alt{g: has, v: c.num(n)})
		ok = append(ok, has)
	}
	if t, m, isScalar := an.vterm(x, c.side()); isScalar && m.has(mStr) {
		isStr := an.kindIs(x, mStr, c.side())
		alts = append(alts, alt{g: isStr, v: c.num(b.App("str.len", smt.Int, an.vs.str(t)))})
		ok = append(ok, isStr)
	}
	return bres{alts: alts, err: b.Not(b.Or(ok...)), ok: true}
}

// arith is +, - or * on integers, exactly as OPA computes them (big
// integers); numbers that may have a fraction are computed in floating
// point by OPA, a gap here. Sets (minus) are setOp's.
func arith(op string) encoder {
	return func(c *bcall) bres {
		b := c.b()
		if op == "-" {
			if _, ok := c.arg(0).(*coll); ok {
				return setOp("minus")(c)
			}
		}
		xy, errs, ok := c.each(2, c.integer)
		if !ok {
			return bres{}
		}
		return c.value(c.num(b.App(op, smt.Int, xy...)), b.Or(errs...))
	}
}

// rem is x % y on integers: Go's truncated remainder; y = 0 fails.
func rem(c *bcall) bres {
	b := c.b()
	xy, errs, ok := c.each(2, c.integer)
	if !ok {
		return bres{}
	}
	x, y := xy[0], xy[1]
	ax := b.Ite(b.Cmp("<", x, b.IntLit(0)), b.App("-", smt.Int, x), x)
	ay := b.Ite(b.Cmp("<", y, b.IntLit(0)), b.App("-", smt.Int, y), y)
	m := b.App("mod", smt.Int, ax, ay) // both non-negative: truncated
	r := b.Ite(b.Cmp("<", x, b.IntLit(0)), b.App("-", smt.Int, m), m)
	return c.value(c.num(r), b.Or(append(errs, b.Eq(y, b.IntLit(0)))...))
}

func abs(c *bcall) bres {
	b := c.b()
	x, ex, ok := c.integer(0)
	if !ok {
		return bres{}
	}
	return c.value(c.num(b.Ite(b.Cmp("<", x, b.IntLit(0)), b.App("-", smt.Int, x), x)), ex)
}

// strPred is startswith, endswith or contains: both strings, else fails.
func strPred(fn string, swap bool) encoder {
	return strFn(2, func(c *bcall, s []*smt.Term) val {
		if swap {
			s[0], s[1] = s[1], s[0] // (str.prefixof prefix s); (str.contains s sub)
		}
		return sym{t: c.vs().boolV(c.b().App(fn, smt.Bool, s...)), m: mBool}
	})
}

// indexof counts characters (code points), as OPA does; -1 when absent.
var indexof = strFn(2, func(c *bcall, s []*smt.Term) val {
	return c.num(c.b().App("str.indexof", smt.Int, s[0], s[1], c.b().IntLit(0)))
})

// trim is trim_prefix (str.prefixof) or trim_suffix (str.suffixof).
func trim(fix string) encoder {
	return strFn(2, func(c *bcall, t []*smt.Term) val {
		b, s, p := c.b(), t[0], t[1]
		ls, lp := b.App("str.len", smt.Int, s), b.App("str.len", smt.Int, p)
		if fix == "str.prefixof" {
			return c.strVal(b.Ite(b.App(fix, smt.Bool, p, s), b.App("str.substr", smt.String, s, lp, b.App("-", smt.Int, ls, lp)), s))
		}
		return c.strVal(b.Ite(b.App(fix, smt.Bool, p, s), b.App("str.substr", smt.String, s, b.IntLit(0), b.App("-", smt.Int, ls, lp)), s))
	})
}

// replace is Go's strings.ReplaceAll, which SMT-LIB's str.replace_all is
// except for an empty old string.
func replace(c *bcall) bres {
	b := c.b()
	t, errs, ok := c.each(3, c.str)
	if !ok {
		return bres{}
	}
	empty, _ := b.StrLit("")
	g := c.gap("replace of an empty string")
	r := b.Ite(b.Eq(t[1], empty), c.vs().str(c.an().uf("replace", sV, g, c.args...)), b.App("str.replace_all", smt.String, t...))
	return c.value(c.strVal(r), b.Or(errs...))
}

// concat joins the strings of an array (or, sorted, of a set of
// constants) with a separator.
func concat(c *bcall) bres {
	an, b := c.an(), c.b()
	sep, esep, ok := c.str(0)
	if !ok {
		return bres{}
	}
	col := c.coll(1)
	if col == nil || col.kind == kObject || len(col.q) > 0 {
		return bres{}
	}
	elems := col.elems
	if col.kind == kSet {
		sorted, ok := sortedMembers(an, col)
		if !ok {
			return bres{}
		}
		elems = sorted
	}
	empty, _ := b.StrLit("")
	acc, started := empty, b.False()
	errs := []*smt.Term{esep}
	for _, e := range elems {
		t, m, ok := an.vterm(e.v, c.side())
		if !ok {
			return bres{}
		}
		s := an.vs.str(t)
		if m != mStr {
			errs = append(errs, b.And(e.g, b.Not(an.vs.is("vstr", t))))
		}
		joined := b.Ite(started, b.App("str.++", smt.String, acc, sep, s), s)
		acc = b.Ite(e.g, joined, acc)
		started = b.Or(started, e.g)
	}
	return c.value(c.strVal(acc), b.Or(errs...))
}

// sprintf with %s and %v of strings and %d and %v of integers (Go's fmt,
// as OPA passes them), and %%.
func sprintf(c *bcall) bres {
	an, b := c.an(), c.b()
	fs, ok := constString(c.arg(0))
	if !ok {
		return bres{}
	}
	list := c.coll(1)
	if list == nil || list.kind != kArray || len(list.q) > 0 {
		return bres{}
	}
	if slices.ContainsFunc(list.elems, func(e *elem) bool { return !e.g.IsTrue() }) {
		return bres{}
	}
	var parts []*smt.Term
	var errs []*smt.Term
	text := fs
	argi := 0
	lit := func(s string) bool {
		t, ok := b.StrLit(s)
		if ok && s != "" {
			parts = append(parts, t)
		}
		return ok
	}
	for {
		i := strings.IndexByte(text, '%')
		if i < 0 {
			if !lit(text) {
				return bres{}
			}
			break
		}
		if !lit(text[:i]) || i+1 >= len(text) {
			return bres{}
		}
		verb := text[i+1]
		text = text[i+2:]
		if verb == '%' {
			lit("%")
			continue
		}
		if argi >= len(list.elems) {
			return bres{}
		}
		t, m, ok := an.vterm(list.elems[argi].v, c.side())
		argi++
		if !ok {
			return bres{}
		}
		switch {
		case (verb == 's' || verb == 'v') && m == mStr:
			parts = append(parts, an.vs.str(t))
		case (verb == 'd' || verb == 'v') && m == mNum:
			parts = append(parts, intString(b, b.App("to_int", smt.Int, an.vs.num(t))))
		default:
			return bres{}
		}
	}
	if argi != len(list.elems) {
		return bres{}
	}
	var s *smt.Term
	switch len(parts) {
	case 0:
		s, _ = b.StrLit("")
	case 1:
		s = parts[0]
	default:
		s = b.App("str.++", smt.String, parts...)
	}
	return c.value(c.strVal(s), b.Or(errs...))
}

// intString is an integer in decimal, with its sign.
func intString(b *smt.Builder, n *smt.Term) *smt.Term {
	minus, _ := b.StrLit("-")
	return b.Ite(b.Cmp("<", n, b.IntLit(0)), b.App("str.++", smt.String, minus, b.App("str.from_int", smt.String, b.App("-", smt.Int, n))), b.App("str.from_int", smt.String, n))
}

func formatInt(c *bcall) bres {
	b := c.b()
	base, ok := intOf(c.arg(1))
	if !ok || base.Cmp(big.NewInt(10)) != 0 {
		return bres{}
	}
	n, en, ok := c.integer(0)
	if !ok {
		return bres{}
	}
	return c.value(c.strVal(intString(b, n)), en)
}

func regexMatch(c *bcall) bres {
	b := c.b()
	ps, ok := constString(c.arg(0))
	if !ok {
		return bres{}
	}
	re, err := regexTerm(b, ps)
	if err != nil {
		return bres{}
	}
	s, es, ok := c.str(1)
	if !ok {
		return bres{}
	}
	return c.value(sym{t: c.vs().boolV(b.App("str.in_re", smt.Bool, s, re)), m: mBool}, es)
}

// caseMap is lower or upper (Go's strings.ToLower, ToUpper: rune by
// rune), not computed but bound by what is true of it: the result has as
// many characters as its argument and none of the letters it maps away
// (from..to), and an ASCII argument without those letters is its own
// result. The rest is a gap: a none stays sound, an example that needs
// more is unknown.
func caseMap(name string, from, to rune) encoder {
	return func(c *bcall) bres {
		an, b := c.an(), c.b()
		s, es, ok := c.str(0)
		if !ok {
			return bres{}
		}
		fn := name + "!str"
		if _, ok := an.gapVars[fn]; !ok {
			an.gapVars[fn] = c.gap("builtin " + name + " on values of the input (bound by its length and letters, not computed)")
		}
		r := b.Fun(fn, smt.String, s)
		lit := func(x rune) *smt.Term { t, _ := b.StrLit(string(x)); return t }
		rng := func(lo, hi rune) *smt.Term { return b.App("re.range", smt.RegLan, lit(lo), lit(hi)) }
		all := b.App("re.*", smt.RegLan, b.App("re.allchar", smt.RegLan))
		letters := b.App("re.++", smt.RegLan, all, rng(from, to), all)
		same := b.App("re.*", smt.RegLan, b.App("re.union", smt.RegLan, rng(0, from-1), rng(to+1, 0x7f)))
		an.axioms = append(an.axioms,
			b.Eq(b.App("str.len", smt.Int, r), b.App("str.len", smt.Int, s)),
			b.Not(b.App("str.in_re", smt.Bool, r, letters)),
			b.Implies(b.App("str.in_re", smt.Bool, s, same), b.Eq(r, s)))
		return c.value(c.strVal(r), es)
	}
}

// objectGet is object.get(obj, key or path, default): OPA's fails unless
// obj is an object; a path is an array of keys, each looked up in what
// the last one found (a constant, or one the plan built of constants).
func objectGet(c *bcall) bres {
	b := c.b()
	var path []*ast.Term
	switch k := c.arg(1).(type) {
	case conc:
		path = []*ast.Term{k.t}
		if arr, ok := k.t.Value.(*ast.Array); ok {
			path = nil
			for i := 0; i < arr.Len(); i++ {
				path = append(path, arr.Elem(i))
			}
		}
	case *coll:
		if k.kind != kArray || len(k.q) > 0 {
			return bres{}
		}
		for _, e := range k.elems {
			kc, ok := e.v.(conc)
			if !ok || !e.g.IsTrue() {
				return bres{}
			}
			path = append(path, kc.t)
		}
	default:
		return bres{}
	}
	cur := []alt{{g: b.True(), v: c.arg(0)}}
	for _, key := range path {
		var next []alt
		for _, a := range cur {
			switch a.v.(type) {
			case *coll, *node, conc:
			default:
				return bres{}
			}
			next = append(next, guardAlts(b, a.g, c.f.dot(a.v, conc{key}, c.s))...)
		}
		cur = next
	}
	found := c.an().joinAlts(cur)
	out := append([]alt(nil), found.alts...)
	out = append(out, alt{g: b.Not(c.an().def(found)), v: c.arg(2)})
	return bres{alts: out, err: b.Not(c.an().kindIs(c.arg(0), mObj, c.side())), ok: true}
}

// sortedMembers orders a set's or array's members when they are all
// constants: equal values merge (a set's copies), present under any copy's
// guard.
func sortedMembers(an *analysis, col *coll) ([]*elem, bool) {
	b := an.vs.b
	var terms []*ast.Term
	guards := map[string]*smt.Term{}
	var out []*elem
	for _, e := range col.elems {
		x, ok := e.v.(conc)
		if !ok {
			return nil, false
		}
		k := x.t.String()
		if g, seen := guards[k]; seen && col.kind == kSet {
			guards[k] = b.Or(g, e.g)
			continue
		}
		if col.kind == kSet {
			guards[k] = e.g
			terms = append(terms, x.t)
			continue
		}
		out = append(out, e)
	}
	if col.kind != kSet {
		// The members themselves, each with its own guard: two members may
		// hold the same term (a shared constant), so a term cannot name one.
		slices.SortStableFunc(out, func(a, b *elem) int { return ast.Compare(a.v.(conc).t, b.v.(conc).t) })
		return out, true
	}
	sortedConc(terms)
	for _, t := range terms {
		out = append(out, &elem{g: guards[t.String()], v: conc{t}})
	}
	return out, true
}

// sortColl sorts a set or array: the members that are constants in
// order; any other member (a value the input or a gap holds) somewhere
// among them, a member whose place the analysis does not know.
func sortColl(c *bcall) bres {
	col, ok := c.arg(0).(*coll)
	if !ok || col.kind == kObject || len(col.q) > 0 {
		return bres{}
	}
	consts := &coll{kind: col.kind}
	var others []*elem
	for _, e := range col.elems {
		if _, isConc := e.v.(conc); isConc {
			consts.elems = append(consts.elems, e)
		} else {
			others = append(others, e)
		}
	}
	elems, ok := sortedMembers(c.an(), consts)
	if !ok {
		return bres{}
	}
	out := c.an().newColl(kArray)
	out.elems = elems
	for _, e := range others {
		out.q = append(out.q, &qelem{cond: e.g, v: e.v})
	}
	return c.value(out, nil)
}

func arrayConcat(c *bcall) bres {
	var parts [2]*coll
	for i := range 2 {
		if parts[i] = c.coll(i); parts[i] == nil || parts[i].kind != kArray || len(parts[i].q) > 0 {
			return bres{}
		}
	}
	out := c.an().newColl(kArray)
	out.elems = append(append([]*elem(nil), parts[0].elems...), parts[1].elems...)
	return c.value(out, nil)
}

// setOp is union (or), intersection (and) and difference (minus) of sets.
func setOp(op string) encoder {
	return func(c *bcall) bres {
		an, b := c.an(), c.b()
		var sets [2]*coll
		for i := range 2 {
			sets[i] = c.coll(i)
			if sets[i] == nil || sets[i].kind != kSet || len(sets[i].q) > 0 {
				return bres{}
			}
		}
		out := an.newColl(kSet)
		in := func(e *elem, s *coll) *smt.Term {
			return b.Or(mapped(s.elems, func(f *elem) *smt.Term { return b.And(f.g, an.eqVals(e.v, f.v, c.side(), c.at())) })...)
		}
		switch op {
		case "or":
			out.elems = append(append([]*elem(nil), sets[0].elems...), sets[1].elems...)
		default: // and, minus
			for _, e := range sets[0].elems {
				g := in(e, sets[1])
				if op != "and" {
					g = b.Not(g)
				}
				out.elems = append(out.elems, &elem{g: b.And(e.g, g), v: e.v})
			}
		}
		return c.value(out, nil)
	}
}
