package smt

import (
	"fmt"
	"maps"
	"strings"
)

// Script writes SMT-LIB text for terms of one Builder, incrementally: each
// variable, function and shared term is declared or defined once, before
// its first use, as a solver reading the text in order needs.
type Script struct {
	b       *Builder
	done    map[int]bool // terms already defined (or inlined leaves)
	funDone map[string]bool
	pre     bool
	out     strings.Builder
	// What was defined since each open push, forgotten at its pop: a
	// solver forgets definitions made inside a scope when it is popped.
	scopes []scope
}

type scope struct {
	ids  []int
	funs []string
}

// Push opens a scope.
func (s *Script) Push() {
	s.Raw("(push 1)")
	s.scopes = append(s.scopes, scope{})
}

// Pop closes the innermost scope.
func (s *Script) Pop() {
	s.Raw("(pop 1)")
	if len(s.scopes) == 0 {
		return
	}
	top := s.scopes[len(s.scopes)-1]
	s.scopes = s.scopes[:len(s.scopes)-1]
	for _, id := range top.ids {
		delete(s.done, id)
	}
	for _, f := range top.funs {
		delete(s.funDone, f)
	}
}

// NewScript starts a script over b's terms.
func NewScript(b *Builder) *Script {
	return &Script{b: b, done: map[int]bool{}, funDone: map[string]bool{}}
}

// Take returns the text written since the last Take.
func (s *Script) Take() string {
	t := s.out.String()
	s.out.Reset()
	return t
}

// Option writes a command that must come before any declaration
// (set-option, set-logic).
func (s *Script) Option(cmd string) {
	s.out.WriteString(cmd)
	s.out.WriteByte('\n')
}

// Raw writes a command as is.
func (s *Script) Raw(cmd string) {
	s.preamble()
	s.out.WriteString(cmd)
	s.out.WriteByte('\n')
}

func (s *Script) preamble() {
	if !s.pre {
		s.pre = true
		if s.b.Preamble != "" {
			s.out.WriteString(s.b.Preamble)
			s.out.WriteByte('\n')
		}
	}
}

// Assert writes (assert t), defining what t needs first.
func (s *Script) Assert(t *Term) {
	s.Raw("(assert " + s.Ref(t) + ")")
}

// Ref defines what t needs and returns the text that names t.
func (s *Script) Ref(t *Term) string {
	s.preamble()
	s.define(t)
	return s.name(t)
}

// name is how a defined term is written where it is used.
func (s *Script) name(t *Term) string {
	switch t.kind {
	case kLit, kVar, kBound:
		return t.lit
	}
	if t.bound || len(t.args) == 0 {
		return s.inline(t)
	}
	return fmt.Sprintf("t%d", t.id)
}

// define writes the declarations and definitions t needs, children first,
// without recursion (terms can be deep).
func (s *Script) define(root *Term) {
	type frame struct {
		t    *Term
		next int
	}
	stack := []frame{{t: root}}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		t := f.t
		if s.done[t.id] {
			stack = stack[:len(stack)-1]
			continue
		}
		if f.next < len(t.args) {
			a := t.args[f.next]
			f.next++
			if !s.done[a.id] {
				stack = append(stack, frame{t: a})
			}
			continue
		}
		stack = stack[:len(stack)-1]
		s.done[t.id] = true
		if n := len(s.scopes); n > 0 {
			s.scopes[n-1].ids = append(s.scopes[n-1].ids, t.id)
		}
		switch t.kind {
		case kVar:
			fmt.Fprintf(&s.out, "(declare-const %s %s)\n", t.lit, t.sort)
		case kApp:
			if i, ok := s.b.funIdx[t.op]; ok && !s.funDone[t.op] {
				s.funDone[t.op] = true
				if n := len(s.scopes); n > 0 {
					s.scopes[n-1].funs = append(s.scopes[n-1].funs, t.op)
				}
				fn := s.b.funs[i]
				fmt.Fprintf(&s.out, "(declare-fun %s (%s) %s)\n", fn.name, strings.Join(fn.args, " "), fn.ret)
			}
			if !t.bound && len(t.args) > 0 {
				fmt.Fprintf(&s.out, "(define-fun t%d () %s %s)\n", t.id, t.sort, s.inline(t))
			}
		case kQuant:
			if !t.bound {
				fmt.Fprintf(&s.out, "(define-fun t%d () Bool %s)\n", t.id, s.inline(t))
			}
		}
	}
}

// inline writes t's own expression, its arguments by name.
func (s *Script) inline(t *Term) string {
	switch t.kind {
	case kLit, kVar, kBound:
		return t.lit
	case kQuant:
		return s.quant(t, map[int]string{})
	}
	return app(t.op, t.args, s.name)
}

// app writes op applied to args, each written by name (op alone without
// arguments).
func app(op string, args []*Term, name func(*Term) string) string {
	if len(args) == 0 {
		return op
	}
	return "(" + op + " " + strings.Join(mapped(args, name), " ") + ")"
}

// quant writes a quantified term, each subterm of its body that depends
// on a bound variable once, named by a let (a quantifier's body is a DAG,
// and written as a tree it can be exponentially larger). scope names the
// terms the enclosing quantifiers' lets named.
func (s *Script) quant(q *Term, scope map[int]string) string {
	inner := maps.Clone(scope)
	var order []*Term
	seen := map[int]bool{}
	var collect func(t *Term)
	collect = func(t *Term) {
		if !t.bound || t.kind == kBound || seen[t.id] {
			return
		}
		if _, ok := inner[t.id]; ok {
			return
		}
		seen[t.id] = true
		if t.kind != kQuant {
			for _, a := range t.args {
				collect(a)
			}
		}
		order = append(order, t)
	}
	body := q.args[0]
	collect(body)
	ref := func(t *Term) string {
		if n, ok := inner[t.id]; ok {
			return n
		}
		return s.name(t)
	}
	var lets strings.Builder
	closing := 0
	for _, t := range order {
		var e string
		if t.kind == kQuant {
			e = s.quant(t, inner)
		} else {
			e = app(t.op, t.args, ref)
		}
		name := fmt.Sprintf("l%d", t.id)
		fmt.Fprintf(&lets, "(let ((%s %s)) ", name, e)
		closing++
		inner[t.id] = name
	}
	return fmt.Sprintf("(%s (%s) %s%s%s)", q.op, binders(q), lets.String(), ref(body), strings.Repeat(")", closing))
}

// binders is a quantifier's list of variables with their sorts.
func binders(q *Term) string {
	return strings.Join(mapped(q.args[1:], func(v *Term) string { return fmt.Sprintf("(%s %s)", v.lit, v.sort) }), " ")
}

// exprLimit bounds the text of one term Expr writes.
const exprLimit = 1 << 20

// Expr writes t as an expression over what is already declared, defining
// nothing (a get-value after check-sat must not change the assertions);
// ok is false when t needs a variable or function not declared yet, which
// nothing constrains, or when its text would pass exprLimit bytes (a term
// not defined yet is written out whole, and shared subterms of a deep one
// repeat: its text can grow exponentially with its depth).
func (s *Script) Expr(t *Term) (string, bool) {
	if t.quant {
		return "", false // get-value takes no quantifier
	}
	memo := map[int]string{}
	size := 0
	var walk func(t *Term) (string, bool)
	walk = func(t *Term) (string, bool) {
		if s.done[t.id] && t.kind != kQuant && !t.bound {
			return s.name(t), true
		}
		if m, ok := memo[t.id]; ok {
			return m, true
		}
		switch t.kind {
		case kLit, kBound:
			return t.lit, true
		case kVar:
			return "", false
		}
		if _, isFun := s.b.funIdx[t.op]; isFun && !s.funDone[t.op] {
			return "", false
		}
		parts := make([]string, len(t.args))
		for i, a := range t.args {
			p, ok := walk(a)
			if !ok {
				return "", false
			}
			parts[i] = p
		}
		var out string
		switch {
		case t.kind == kQuant:
			out = fmt.Sprintf("(%s (%s) %s)", t.op, binders(t), parts[0])
		case len(parts) == 0:
			out = t.op
		default:
			out = "(" + t.op + " " + strings.Join(parts, " ") + ")"
		}
		if size += len(out); size > exprLimit {
			return "", false
		}
		memo[t.id] = out
		return out, true
	}
	return walk(t)
}
