package diff

import (
	"fmt"
	"math/big"
	"slices"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// Every Rego value the analysis reasons about is a term of the datatype V:
// JSON values with their type tags. A number is a rational (JSON numbers
// are decimals, and OPA compares and adds integers exactly); a string is a
// string of the solvers' theory of strings; an array or object of the
// input is only its length here (its members are terms of their own, see
// input.go), so that V's equality is Rego's equality on scalars and never
// used on two collections.
const vPreamble = `(declare-datatypes ((V 0)) (((vnull) (vbool (vb Bool)) (vnum (vn Real)) (vstr (vs String)) (varr (va Int)) (vobj (vo Int)) (vset (vz Int)) (vtok (vt Int)))))`

const sV smt.Sort = "V"

// mask is what kinds of value a term may hold, as far as the analysis
// knows without asking a solver (from the input schema, or from how the
// value was made).
type mask uint16

const (
	mNull mask = 1 << iota
	mBool
	mNum
	mStr
	mArr
	mObj
	mSet
	mFrac // a number that may have a fractional part
)

const (
	mScalar = mNull | mBool | mNum | mStr | mFrac
	mColl   = mArr | mObj | mSet
	mAny    = mScalar | mColl
)

func (m mask) has(k mask) bool { return m&k != 0 }

// val is a symbolic Rego value; always defined (a local that may be
// undefined holds a slot whose alternatives do not cover its path).
// It is one of:
//
//	conc     a concrete value
//	sym      a scalar term of sort V
//	*node    a value of the input at a path (input.go)
//	*coll    an array, set or object the policy builds, member by member
//	*opaque  a value the analysis does not model: a token and a reason
type val any

type conc struct{ t *ast.Term }

// mapped is f of each of xs, in order.
func mapped[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// constString is v's value when it is a constant string.
func constString(v val) (string, bool) {
	c, ok := v.(conc)
	if !ok {
		return "", false
	}
	s, ok := c.t.Value.(ast.String)
	return string(s), ok
}

type sym struct {
	t *smt.Term
	m mask
}

// opaque is a value whose content the analysis does not model. Every
// operation on it is an uninterpreted function of its token, so the same
// computation in both revisions is the same term, and everything else
// about it is free for the solver: a sound over-approximation, and the
// gap it comes from is what an unconfirmed example is blamed on.
type opaque struct {
	tok *smt.Term // of sort V: vtok of an uninterpreted Int
	gap *gap
}

// gap is something the analysis does not model, with where it is.
type gap struct {
	why string
	at  string // file:line
}

func (g *gap) String() string {
	if g.at == "" {
		return g.why
	}
	return g.at + ": " + g.why
}

// slot is what a local holds on the path that reaches a statement: a value
// under each of its disjoint guards, and undefined where none holds.
type slot struct {
	alts []alt
}

type alt struct {
	g *smt.Term
	v val
}

var undefined = &slot{}

// guardAlts is alts, each where g holds as well.
func guardAlts(b *smt.Builder, g *smt.Term, alts []alt) []alt {
	return mapped(alts, func(a alt) alt { return alt{g: b.And(g, a.g), v: a.v} })
}

// vals is the shared vocabulary of V terms.
type vals struct {
	b *smt.Builder
}

func newVals(limit int) *vals {
	b := smt.NewBuilder(limit)
	b.Preamble = vPreamble
	for _, c := range ctors {
		b.Constructor(c)
	}
	return &vals{b: b}
}

func (vs *vals) null() *smt.Term             { return vs.b.App("vnull", sV) }
func (vs *vals) boolV(x *smt.Term) *smt.Term { return vs.b.App("vbool", sV, x) }
func (vs *vals) numV(x *smt.Term) *smt.Term  { return vs.b.App("vnum", sV, x) }
func (vs *vals) strV(x *smt.Term) *smt.Term  { return vs.b.App("vstr", sV, x) }

// is tests x's constructor, folded when x is an application of one.
func (vs *vals) is(ctor string, x *smt.Term) *smt.Term {
	if isCtor(x.Op()) {
		return vs.b.BoolLit(x.Op() == ctor)
	}
	return vs.b.App("(_ is "+ctor+")", smt.Bool, x)
}

// field selects a constructor's field, folded on an application.
func (vs *vals) field(sel string, s smt.Sort, x *smt.Term) *smt.Term {
	if ctor, ok := selectorOf[sel]; ok && x.Op() == ctor {
		return x.Args()[0]
	}
	return vs.b.App(sel, s, x)
}

var selectorOf = map[string]string{"vb": "vbool", "vn": "vnum", "vs": "vstr", "va": "varr", "vo": "vobj", "vz": "vset", "vt": "vtok"}

// ctors are V's constructors.
var ctors = append(slices.Clone(kindCtors), "vtok")

func isCtor(op string) bool { return slices.Contains(ctors, op) }

func (vs *vals) num(x *smt.Term) *smt.Term { return vs.field("vn", smt.Real, x) }
func (vs *vals) str(x *smt.Term) *smt.Term { return vs.field("vs", smt.String, x) }
func (vs *vals) bl(x *smt.Term) *smt.Term  { return vs.field("vb", smt.Bool, x) }

// isInt is "x is a number without a fractional part".
func (vs *vals) isInt(x *smt.Term) *smt.Term {
	return vs.b.And(vs.is("vnum", x), vs.intReal(vs.num(x)))
}

func (vs *vals) intReal(r *smt.Term) *smt.Term {
	if q, ok := smt.NumLit(r); ok {
		return vs.b.BoolLit(q.IsInt())
	}
	return vs.b.App("is_int", smt.Bool, r)
}

// scalarTerm is the V term of a concrete scalar; ok is false for
// collections and for strings the solvers' alphabet cannot hold.
func (vs *vals) scalarTerm(v ast.Value) (*smt.Term, bool) {
	switch v := v.(type) {
	case ast.Null:
		return vs.null(), true
	case ast.Boolean:
		return vs.boolV(vs.b.BoolLit(bool(v))), true
	case ast.Number:
		r, ok := ratOf(v)
		if !ok {
			return nil, false
		}
		return vs.numV(vs.b.RealLit(r)), true
	case ast.String:
		s, ok := vs.b.StrLit(string(v))
		if !ok {
			return nil, false
		}
		return vs.strV(s), true
	}
	return nil, false
}

// ratOf is a JSON number exactly.
func ratOf(n ast.Number) (*big.Rat, bool) {
	r, ok := new(big.Rat).SetString(string(n))
	return r, ok
}

// maskOf is the kind of a concrete value.
func maskOf(v ast.Value) mask {
	switch v := v.(type) {
	case ast.Null:
		return mNull
	case ast.Boolean:
		return mBool
	case ast.Number:
		if r, ok := ratOf(v); ok && r.IsInt() {
			return mNum
		}
		return mNum | mFrac
	case ast.String:
		return mStr
	case *ast.Array:
		return mArr
	case ast.Object:
		return mObj
	case ast.Set:
		return mSet
	}
	return mAny
}

// kindRank is Rego's order of kinds: null < boolean < number < string <
// array < object < set.
var kindCtors = []string{"vnull", "vbool", "vnum", "vstr", "varr", "vobj", "vset"}

// rank is the V term's kind as an integer, in Rego's order of kinds.
func (vs *vals) rank(x *smt.Term) *smt.Term {
	r := vs.b.IntLit(7) // vtok: an opaque value, ordered by uninterpreted functions instead
	for i := len(kindCtors) - 1; i >= 0; i-- {
		r = vs.b.Ite(vs.is(kindCtors[i], x), vs.b.IntLit(int64(i)), r)
	}
	return r
}

// kindTest is the formula that x's kind is in m.
func (vs *vals) kindTest(x *smt.Term, m mask) *smt.Term {
	var out []*smt.Term
	for i, k := range []mask{mNull, mBool, mNum, mStr, mArr, mObj, mSet} {
		if m.has(k) {
			out = append(out, vs.is(kindCtors[i], x))
		}
	}
	return vs.b.Or(out...)
}

// describe names a slot's value for messages.
func describe(v val) string {
	switch v := v.(type) {
	case conc:
		return v.t.String()
	case sym:
		return "a symbolic value"
	case *node:
		return "input" + v.t.pointer()
	case *coll:
		return "a " + v.kind.String()
	case *opaque:
		return "an unmodelled value (" + v.gap.why + ")"
	}
	return fmt.Sprintf("%T", v)
}

// collKind is what a coll is.
type collKind uint8

const (
	kArray collKind = iota
	kSet
	kObject
)

func (k collKind) String() string {
	return [...]string{"array", "set", "object"}[k]
}

// coll is an array, set or object the policy builds: its members, each
// present under a guard (relative to the coll's own presence). An array's
// member positions are the order of its present members; a set's members
// may repeat (a value is in the set when any of its copies is present); an
// object's members have keys.
type coll struct {
	kind  collKind
	alloc int // the statement execution that made it: merges join only one allocation's
	elems []*elem
	// q holds members added by a scan over an input collection: present
	// under a formula of a bound index (scan.go).
	q []*qelem
}

type elem struct {
	g   *smt.Term
	key val // objects only
	v   val
}

func (e *elem) guarded(b *smt.Builder, g *smt.Term) *elem {
	return &elem{g: b.And(g, e.g), key: e.key, v: e.v}
}

func (c *coll) with(e *elem) *coll {
	return &coll{kind: c.kind, alloc: c.alloc, elems: append(slices.Clip(c.elems), e), q: c.q}
}

// concColl turns a concrete collection into a coll whose members are all
// present.
func (vs *vals) concColl(t *ast.Term) (*coll, bool) {
	tt := vs.b.True()
	// A constant's members never change: its allocation is its own.
	switch v := t.Value.(type) {
	case *ast.Array:
		c := &coll{kind: kArray}
		for i := 0; i < v.Len(); i++ {
			c.elems = append(c.elems, &elem{g: tt, v: conc{v.Elem(i)}})
		}
		return c, true
	case ast.Set:
		c := &coll{kind: kSet}
		v.Foreach(func(x *ast.Term) { c.elems = append(c.elems, &elem{g: tt, v: conc{x}}) })
		return c, true
	case ast.Object:
		c := &coll{kind: kObject}
		v.Foreach(func(k, x *ast.Term) { c.elems = append(c.elems, &elem{g: tt, key: conc{k}, v: conc{x}}) })
		return c, true
	}
	return nil, false
}

// concrete returns the coll's value when every member is concrete and
// present.
func (c *coll) concrete() (*ast.Term, bool) {
	if len(c.q) > 0 {
		return nil, false
	}
	var terms []*ast.Term
	var keys []*ast.Term
	for _, e := range c.elems {
		if !e.g.IsTrue() {
			return nil, false
		}
		x, ok := e.v.(conc)
		if !ok {
			return nil, false
		}
		terms = append(terms, x.t)
		if c.kind == kObject {
			k, ok := e.key.(conc)
			if !ok {
				return nil, false
			}
			keys = append(keys, k.t)
		}
	}
	switch c.kind {
	case kArray:
		return ast.ArrayTerm(terms...), true
	case kSet:
		return ast.SetTerm(terms...), true
	}
	obj := ast.NewObject()
	for i := range terms {
		if old := obj.Get(keys[i]); old != nil && ast.Compare(old, terms[i]) != 0 {
			return nil, false
		}
		obj.Insert(keys[i], terms[i])
	}
	return ast.NewTerm(obj), true
}

// sortedConc orders concrete terms as Rego orders them.
func sortedConc(ts []*ast.Term) {
	sort.SliceStable(ts, func(i, j int) bool { return ast.Compare(ts[i], ts[j]) < 0 })
}

// valKey is an identity for memoizing on a value: equal keys, equal
// values (the converse need not hold).
func valKey(v val) string {
	switch v := v.(type) {
	case conc:
		return "c" + v.t.String()
	case sym:
		return fmt.Sprintf("s%d", v.t.ID())
	case *node:
		return "n" + v.key()
	case *coll:
		return fmt.Sprintf("l%p", v)
	case *opaque:
		return fmt.Sprintf("o%d", v.tok.ID())
	case *overlay:
		return fmt.Sprintf("w%p", v)
	case nil:
		return "undef"
	}
	return fmt.Sprintf("?%p", v)
}
