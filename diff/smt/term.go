// Package smt builds terms of SMT-LIB 2 and asks an SMT solver about them:
// cvc5 or z3, driven as a child process over a pipe, as Cedar's symbolic
// compiler drives cvc5. Terms are hash-consed (one *Term per distinct
// expression), so that two revisions of a policy that compute the same thing
// share the same terms, and simplified as they are built (constants folded,
// Boolean connectives flattened), so that what a solver sees is small.
package smt

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Sort is an SMT-LIB sort: Bool, Int, Real, String, RegLan, or a datatype
// the caller declares.
type Sort string

// The built-in sorts.
const (
	Bool   Sort = "Bool"
	Int    Sort = "Int"
	Real   Sort = "Real"
	String Sort = "String"
	RegLan Sort = "RegLan"
)

// Term is one SMT-LIB expression. Terms are immutable and unique per
// Builder: two equal expressions are the same *Term.
type Term struct {
	op    string // function symbol; "" for a constant or a variable
	lit   string // the constant's SMT-LIB text, or the variable's name
	args  []*Term
	sort  Sort
	id    int
	kind  termKind
	bound bool // contains a variable bound by a quantifier
	quant bool // contains a quantifier
}

type termKind uint8

const (
	kApp   termKind = iota
	kLit            // a constant: true, 5, 1.5, "abc"
	kVar            // a declared constant (a free variable)
	kBound          // a variable bound by a quantifier
	kQuant          // forall/exists: lit holds the binder list
)

// Sort returns t's sort.
func (t *Term) Sort() Sort { return t.sort }

// IsTrue and IsFalse report whether t is the Boolean constant.
func (t *Term) IsTrue() bool  { return t.kind == kLit && t.lit == "true" }
func (t *Term) IsFalse() bool { return t.kind == kLit && t.lit == "false" }

// IsLit reports whether t is a constant (a literal).
func (t *Term) IsLit() bool { return t.kind == kLit }

// Op is t's function symbol ("" for constants and variables).
func (t *Term) Op() string { return t.op }

// Args are t's arguments.
func (t *Term) Args() []*Term { return t.args }

// Lit is a constant's SMT-LIB text.
func (t *Term) Lit() string { return t.lit }

// Name is a variable's name.
func (t *Term) Name() string {
	if t.kind == kVar || t.kind == kBound {
		return t.lit
	}
	return ""
}

// ID is t's number in its Builder, unique per term.
func (t *Term) ID() int { return t.id }

// ErrTooLarge is the panic value a Builder raises past its limit of terms,
// recovered by the analysis that drives it.
var ErrTooLarge = errors.New("too many terms")

// Builder makes terms. It is not safe for concurrent use.
type Builder struct {
	groundMemo map[int]bool
	terms      map[string]*Term
	all        []*Term
	funs       []fun
	funIdx     map[string]int
	ctors      map[string]bool // datatype constructors, for folding equalities
	limit      int
	fresh      int
	// Preamble is SMT-LIB text declared before anything else (datatypes).
	Preamble string
}

type fun struct {
	name string
	args []string // the argument sorts
	ret  Sort
}

// NewBuilder returns a Builder that panics with ErrTooLarge once it holds
// more than limit terms (0: no limit).
func NewBuilder(limit int) *Builder {
	return &Builder{groundMemo: map[int]bool{}, terms: map[string]*Term{}, funIdx: map[string]int{}, ctors: map[string]bool{}, limit: limit}
}

// Constructor declares name as a datatype constructor: two applications
// of different constructors are never equal.
func (b *Builder) Constructor(name string) { b.ctors[name] = true }

func (b *Builder) intern(t *Term) *Term {
	var key strings.Builder
	key.WriteString(strconv.Itoa(int(t.kind)))
	key.WriteByte('|')
	key.WriteString(t.op)
	key.WriteByte('|')
	key.WriteString(t.lit)
	key.WriteByte('|')
	key.WriteString(string(t.sort))
	for _, a := range t.args {
		key.WriteByte(',')
		key.WriteString(strconv.Itoa(a.id))
	}
	k := key.String()
	if old, ok := b.terms[k]; ok {
		return old
	}
	if b.limit > 0 && len(b.all) >= b.limit {
		panic(ErrTooLarge)
	}
	t.id = len(b.all)
	for _, a := range t.args {
		t.bound = t.bound || a.bound
		t.quant = t.quant || a.quant
	}
	t.quant = t.quant || t.kind == kQuant
	if t.kind == kBound {
		t.bound = true
	}
	if t.kind == kQuant {
		// The binder's own variables are bound inside it; the quantified
		// term itself is closed unless an outer binder's variable occurs.
		t.bound = false
		for _, a := range t.args {
			if a.bound && !bindsAll(t, a) {
				t.bound = true
			}
		}
	}
	b.terms[k] = t
	b.all = append(b.all, t)
	return t
}

// bindsAll reports whether every bound variable that occurs free in body
// is one that q binds (a nested quantifier's own variables are not free).
func bindsAll(q, body *Term) bool {
	bound := map[string]int{}
	for _, v := range strings.Fields(q.lit) {
		bound[v]++
	}
	seen := map[int]bool{}
	var free func(t *Term) bool
	free = func(t *Term) bool {
		if !t.bound {
			return false
		}
		if t.kind == kBound {
			return bound[t.lit] == 0
		}
		if t.kind == kQuant {
			names := strings.Fields(t.lit)
			for _, v := range names {
				bound[v]++
			}
			r := free(t.args[0])
			for _, v := range names {
				bound[v]--
			}
			return r
		}
		if seen[t.id] {
			return false
		}
		for _, a := range t.args {
			if free(a) {
				return true
			}
		}
		seen[t.id] = true
		return false
	}
	return !free(body)
}

// Var declares a free variable of sort s. Names are made unique by the
// caller; a name declared twice is one variable.
func (b *Builder) Var(name string, s Sort) *Term {
	return b.intern(&Term{kind: kVar, lit: name, sort: s})
}

// Fresh declares a new variable named prefix!N.
func (b *Builder) Fresh(prefix string, s Sort) *Term {
	b.fresh++
	return b.Var(fmt.Sprintf("%s!%d", prefix, b.fresh), s)
}

// Bound is a variable for a quantifier to bind.
func (b *Builder) Bound(name string, s Sort) *Term {
	return b.intern(&Term{kind: kBound, lit: name, sort: s})
}

// Fun declares an uninterpreted function and applies it to args.
func (b *Builder) Fun(name string, ret Sort, args ...*Term) *Term {
	if _, ok := b.funIdx[name]; !ok {
		b.funIdx[name] = len(b.funs)
		b.funs = append(b.funs, fun{name: name, ret: ret, args: mapped(args, func(a *Term) string { return string(a.sort) })})
	}
	return b.intern(&Term{op: name, args: args, sort: ret})
}

// App applies an interpreted function symbol (or a datatype's constructor,
// tester or selector) of result sort s.
func (b *Builder) App(op string, s Sort, args ...*Term) *Term {
	return b.intern(&Term{op: op, args: args, sort: s})
}

// Lit is a constant of sort s written as text.
func (b *Builder) Lit(text string, s Sort) *Term {
	return b.intern(&Term{kind: kLit, lit: text, sort: s})
}

// True and False are the Boolean constants.
func (b *Builder) True() *Term  { return b.Lit("true", Bool) }
func (b *Builder) False() *Term { return b.Lit("false", Bool) }

// BoolLit is b as a constant.
func (b *Builder) BoolLit(v bool) *Term {
	if v {
		return b.True()
	}
	return b.False()
}

// IntLit is the integer constant n.
func (b *Builder) IntLit(n int64) *Term { return b.IntBig(big.NewInt(n)) }

// IntBig is the integer constant n.
func (b *Builder) IntBig(n *big.Int) *Term {
	if n.Sign() < 0 {
		return b.App("-", Int, b.Lit(new(big.Int).Neg(n).String(), Int))
	}
	return b.Lit(n.String(), Int)
}

// RealLit is the rational constant r, exactly.
func (b *Builder) RealLit(r *big.Rat) *Term {
	neg := r.Sign() < 0
	a := new(big.Rat).Abs(r)
	var t *Term
	if a.IsInt() {
		t = b.Lit(a.Num().String()+".0", Real)
	} else {
		t = b.App("/", Real, b.Lit(a.Num().String()+".0", Real), b.Lit(a.Denom().String()+".0", Real))
	}
	if neg {
		return b.App("-", Real, t)
	}
	return t
}

// StrLit is the string constant s, in SMT-LIB 2.6 syntax: printable ASCII
// as is (a quote doubled), everything else as \u{...}. ok is false when s
// holds a code point past the solvers' alphabet (U+2FFFF).
func (b *Builder) StrLit(s string) (*Term, bool) {
	var out strings.Builder
	out.WriteByte('"')
	for _, r := range s {
		switch {
		case r > MaxChar:
			return nil, false
		case r == '"':
			out.WriteString(`""`)
		case r == '\\':
			// A backslash followed by u would start an escape.
			out.WriteString(`\u{5c}`)
		case r >= 0x20 && r < 0x7f:
			out.WriteRune(r)
		default:
			fmt.Fprintf(&out, `\u{%x}`, r)
		}
	}
	out.WriteByte('"')
	return b.Lit(out.String(), String), true
}

// MaxChar is the largest code point of SMT-LIB's string alphabet.
const MaxChar = 0x2FFFF

// Not is the negation of x.
func (b *Builder) Not(x *Term) *Term {
	switch {
	case x.IsTrue():
		return b.False()
	case x.IsFalse():
		return b.True()
	case x.op == "not":
		return x.args[0]
	}
	return b.App("not", Bool, x)
}

// And is the conjunction of xs.
func (b *Builder) And(xs ...*Term) *Term { return b.junction("and", xs) }

// Or is the disjunction of xs.
func (b *Builder) Or(xs ...*Term) *Term { return b.junction("or", xs) }

func (b *Builder) junction(op string, xs []*Term) *Term {
	unit, zero := b.True(), b.False()
	if op == "or" {
		unit, zero = zero, unit
	}
	var out []*Term
	seen := map[int]bool{}
	var add func(x *Term) bool
	add = func(x *Term) bool {
		switch {
		case x == zero:
			return false
		case x == unit:
			return true
		case x.op == op:
			for _, a := range x.args {
				if !add(a) {
					return false
				}
			}
			return true
		}
		if seen[x.id] {
			return true
		}
		seen[x.id] = true
		out = append(out, x)
		return true
	}
	for _, x := range xs {
		if !add(x) {
			return zero
		}
	}
	for _, x := range out {
		if x.op != "not" {
			continue
		}
		if seen[x.args[0].id] {
			return zero // x and not x
		}
		// x1 and x2 and not (x1 and x2), flattened.
		if inner := x.args[0]; inner.op == op && !slices.ContainsFunc(inner.args, func(a *Term) bool { return !seen[a.id] }) {
			return zero
		}
	}
	switch len(out) {
	case 0:
		return unit
	case 1:
		return out[0]
	}
	return b.App(op, Bool, out...)
}

// Implies is x => y.
func (b *Builder) Implies(x, y *Term) *Term { return b.Or(b.Not(x), y) }

// Ite is if c then x else y.
func (b *Builder) Ite(c, x, y *Term) *Term {
	switch {
	case c.IsTrue() || x == y:
		return x
	case c.IsFalse():
		return y
	case c.op == "not":
		return b.Ite(c.args[0], y, x)
	}
	if x.sort == Bool {
		switch {
		case x.IsTrue() && y.IsFalse():
			return c
		case x.IsFalse() && y.IsTrue():
			return b.Not(c)
		case y.IsFalse():
			return b.And(c, x)
		case x.IsTrue():
			return b.Or(c, y)
		case x.IsFalse():
			return b.And(b.Not(c), y)
		case y.IsTrue():
			return b.Or(b.Not(c), x)
		}
	}
	return b.App("ite", x.sort, c, x, y)
}

// Eq is x = y, folded when both are constants or applications of
// constructors.
func (b *Builder) Eq(x, y *Term) *Term {
	if x == y {
		return b.True()
	}
	if x.kind == kLit && y.kind == kLit {
		return b.False() // distinct constants of one sort (hash-consing)
	}
	// An if-then-else of constants against a constant (or another such):
	// a Boolean formula, with no theory left for the solver to reason in.
	if x.op == "ite" && b.ground(y) && b.iteOfGround(x) {
		return b.Ite(x.args[0], b.Eq(x.args[1], y), b.Eq(x.args[2], y))
	}
	if y.op == "ite" && b.ground(x) && b.iteOfGround(y) {
		return b.Ite(y.args[0], b.Eq(x, y.args[1]), b.Eq(x, y.args[2]))
	}
	if b.ctors[x.op] && b.ctors[y.op] {
		if x.op != y.op {
			return b.False()
		}
		eqs := make([]*Term, len(x.args))
		for i := range x.args {
			eqs[i] = b.Eq(x.args[i], y.args[i])
		}
		return b.And(eqs...)
	}
	if gs, ok := indicators(x); ok && isZero(y) {
		return b.nonePresent(gs)
	}
	if gs, ok := indicators(y); ok && isZero(x) {
		return b.nonePresent(gs)
	}
	if x.sort == Bool {
		switch {
		case x.IsTrue():
			return y
		case y.IsTrue():
			return x
		case x.IsFalse():
			return b.Not(y)
		case y.IsFalse():
			return b.Not(x)
		}
	}
	if x.id > y.id {
		x, y = y, x
	}
	return b.App("=", Bool, x, y)
}

// Forall and Exists quantify body over vars (Bound terms).
func (b *Builder) Forall(vars []*Term, body *Term) *Term { return b.quant("forall", vars, body) }

// Exists quantifies body over vars (Bound terms).
func (b *Builder) Exists(vars []*Term, body *Term) *Term { return b.quant("exists", vars, body) }

func (b *Builder) quant(q string, vars []*Term, body *Term) *Term {
	if body.kind == kLit || !body.bound {
		return body
	}
	t := &Term{kind: kQuant, op: q, lit: strings.Join(mapped(vars, func(v *Term) string { return v.lit }), " "), args: append([]*Term{body}, vars...), sort: Bool}
	return b.intern(t)
}

// Int arithmetic and comparisons; the caller keeps the sorts straight.

// Add is the sum of xs (of sort s).
func (b *Builder) Add(s Sort, xs ...*Term) *Term {
	out := slices.DeleteFunc(slices.Clone(xs), isZero)
	switch len(out) {
	case 0:
		if s == Real {
			return b.Lit("0.0", Real)
		}
		return b.Lit("0", Int)
	case 1:
		return out[0]
	}
	return b.App("+", s, out...)
}

// Cmp applies a comparison op (<, <=, >, >=) to two numbers.
func (b *Builder) Cmp(op string, x, y *Term) *Term {
	if same := cmpHolds(op, 0); x == y {
		return b.BoolLit(same)
	}
	// A count of guards against 0 or 1 is a Boolean formula.
	if gs, ok := indicators(x); ok {
		if yv, ok := NumLit(y); ok && (yv.Sign() == 0 || yv.Cmp(big.NewRat(1, 1)) == 0) {
			zero := yv.Sign() == 0
			switch {
			case op == ">" && zero, op == ">=" && !zero:
				return b.Not(b.nonePresent(gs))
			case op == "<=" && zero, op == "<" && !zero:
				return b.nonePresent(gs)
			case op == ">=" && zero:
				return b.True()
			case op == "<" && zero:
				return b.False()
			}
		}
	}
	if xv, ok := NumLit(x); ok {
		if yv, ok := NumLit(y); ok {
			c := xv.Cmp(yv)
			return b.BoolLit(cmpHolds(op, c))
		}
	}
	return b.App(op, Bool, x, y)
}

// cmpHolds is whether op holds of two numbers that compare as c (-1, 0,
// 1). Any other op is a fault of the analysis (an answer it cannot give),
// never a constant folded to false, which could prove a property vacuously.
func cmpHolds(op string, c int) bool {
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	panic(fmt.Sprintf("smt: %q is not a comparison", op))
}

// NumLit reads an integer or real constant (possibly negated or a ratio)
// exactly.
func NumLit(t *Term) (*big.Rat, bool) {
	switch {
	case t.kind == kLit && (t.sort == Int || t.sort == Real):
		r, ok := new(big.Rat).SetString(t.lit)
		return r, ok
	case t.op == "-" && len(t.args) == 1:
		r, ok := NumLit(t.args[0])
		if ok {
			r.Neg(r)
		}
		return r, ok
	case t.op == "/" && len(t.args) == 2:
		n, ok1 := NumLit(t.args[0])
		d, ok2 := NumLit(t.args[1])
		if ok1 && ok2 && d.Sign() != 0 {
			return n.Quo(n, d), true
		}
	}
	return nil, false
}

// IsBoundTerm reports whether t contains a variable a quantifier binds.
func (t *Term) IsBoundTerm() bool { return t.bound }

// indicators reads a sum of (ite g 1 0) terms (possibly as a real): the
// count of the guards that hold.
func indicators(t *Term) ([]*Term, bool) {
	if t.op == "to_real" && len(t.args) == 1 {
		t = t.args[0]
	}
	switch {
	case isZero(t):
		return nil, true
	case t.op == "ite" && isOne(t.args[1]) && isZero(t.args[2]):
		return []*Term{t.args[0]}, true
	case t.op == "+":
		var out []*Term
		for _, a := range t.args {
			gs, ok := indicators(a)
			if !ok {
				return nil, false
			}
			out = append(out, gs...)
		}
		return out, true
	}
	return nil, false
}

func isZero(t *Term) bool { return t.kind == kLit && (t.lit == "0" || t.lit == "0.0") }
func isOne(t *Term) bool  { return t.kind == kLit && (t.lit == "1" || t.lit == "1.0") }

func (b *Builder) nonePresent(gs []*Term) *Term { return b.And(mapped(gs, b.Not)...) }

// ground reports whether t is a constant: literals and constructors of
// them.
func (b *Builder) ground(t *Term) bool {
	switch t.kind {
	case kLit:
		return true
	case kApp:
		if !b.ctors[t.op] {
			if t.op != "-" && t.op != "/" {
				return false
			}
		}
		if g, ok := b.groundMemo[t.id]; ok {
			return g
		}
		g := !slices.ContainsFunc(t.args, func(a *Term) bool { return !b.ground(a) })
		b.groundMemo[t.id] = g
		return g
	}
	return false
}

// iteOfGround reports whether t is an if-then-else tree whose leaves are
// constants.
func (b *Builder) iteOfGround(t *Term) bool {
	if t.op != "ite" {
		return b.ground(t)
	}
	return b.iteOfGround(t.args[1]) && b.iteOfGround(t.args[2])
}

// mapped is f of each of xs, in order.
func mapped[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// Quantified reports whether t contains a quantifier.
func Quantified(t *Term) bool { return t.quant }

// Clauses splits a formula into conjuncts, each "guards imply a formula"
// with the implication's conclusion split too: (a => (b and c)) is
// (a => b) and (a => c). Equal parts of two formulas become the same
// terms, so what they share can be told apart from what they do not.
func Clauses(b *Builder, t *Term) []*Term {
	var out []*Term
	var walk func(guards []*Term, t *Term)
	walk = func(guards []*Term, t *Term) {
		switch {
		case t.IsTrue():
			return
		case t.op == "and":
			for _, a := range t.args {
				walk(guards, a)
			}
			return
		case t.op == "or":
			// (or (not g1) ... body): the negated disjuncts are guards,
			// when exactly one disjunct is not a negation.
			var body *Term
			var gs []*Term
			for _, a := range t.args {
				if a.op == "not" {
					gs = append(gs, a.args[0])
					continue
				}
				if body != nil {
					body = nil
					gs = nil
					break
				}
				body = a
			}
			if body != nil && body.op == "and" {
				walk(append(append([]*Term(nil), guards...), gs...), body)
				return
			}
		}
		if len(guards) == 0 {
			out = append(out, t)
			return
		}
		out = append(out, b.Or(append(mapped(guards, b.Not), t)...))
	}
	walk(nil, t)
	return out
}

// IsQuantifier reports whether t is forall or exists (its first argument
// the body, the others the variables it binds).
func IsQuantifier(t *Term) bool { return t.kind == kQuant }
