package diff

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// call runs a CallStmt: a plan function (a rule), or a builtin.
func (f *frame) call(s *ir.CallStmt, st *state) (*state, flow) {
	b := f.b()
	args := make([]*slot, len(s.Args))
	for i, a := range s.Args {
		args[i] = f.operand(st, a)
	}
	var res []alt
	if fn, ok := f.sd.funcs[s.Func]; ok {
		if len(args) != len(fn.Params) {
			panic(fmt.Sprintf("call of %s with %d arguments, want %d", s.Func, len(args), len(fn.Params)))
		}
		// A plan function takes undefined arguments too.
		for _, combo := range combos(b, args, true) {
			r := f.sd.function(fn, combo.vals)
			f.propagate(st, b.And(combo.g, r.err))
			res = append(res, guardAlts(b, combo.g, r.ret.alts)...)
		}
	} else {
		// A builtin with an undefined argument is undefined.
		for _, combo := range combos(b, args, false) {
			alts, errc := f.builtin(s, combo.vals)
			f.fail(st, b.And(combo.g, errc))
			res = append(res, guardAlts(b, combo.g, alts)...)
		}
	}
	return f.assign(st, s.Result, res)
}

type combo struct {
	g    *smt.Term
	vals []val // nil: undefined
}

// combos are the ways the argument slots can hold values together.
func combos(b *smt.Builder, args []*slot, undef bool) []combo {
	out := []combo{{g: b.True()}}
	for _, a := range args {
		alts := a.alts
		if undef {
			if d := b.Or(altGuards(a.alts)...); !d.IsTrue() {
				alts = append(append([]alt(nil), alts...), alt{g: b.Not(d)})
			}
		}
		var next []combo
		for _, c := range out {
			for _, x := range alts {
				g := b.And(c.g, x.g)
				if g.IsFalse() {
					continue
				}
				next = append(next, combo{g: g, vals: append(append([]val(nil), c.vals...), x.v)})
			}
		}
		out = next
	}
	return out
}

// function runs a plan function on args (nil: undefined), memoized: the
// same function of the same values is run once.
func (sd *side) function(fn *ir.Func, args []val) *callResult {
	k := strings.Join(append([]string{fn.Name}, mapped(args, valKey)...), "|")
	if r, ok := sd.memo[k]; ok {
		return r
	}
	if sd.busy[fn.Name] {
		panic(fmt.Sprintf("function %s calls itself", fn.Name))
	}
	sd.busy[fn.Name] = true
	defer delete(sd.busy, fn.Name)
	b := sd.an.vs.b
	f := &frame{sd: sd, fn: fn.Name}
	st := &state{pc: &pc{}}
	for i, p := range fn.Params {
		if args[i] != nil {
			st = st.set(p, sd.an.one(args[i]))
		}
	}
	var alts []alt
	for _, r := range f.blocks(fn.Blocks, st) {
		alts = append(alts, guardAlts(b, r.pc.term(b), r.retv.alts)...)
	}
	res := &callResult{ret: sd.an.joinAlts(alts), err: b.Or(f.errs...)}
	sd.memo[k] = res
	return res
}

// builtin encodes a builtin call on values: its result's alternatives and
// where it fails (an error: strict builtin errors are errors).
func (f *frame) builtin(s *ir.CallStmt, args []val) ([]alt, *smt.Term) {
	an, b := f.sd.an, f.b()
	// Constants fold on OPA's own implementation: computed constants
	// (30 * 30, concat of constants) are constants.
	all := true
	terms := make([]*ast.Term, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case conc:
			terms[i] = v.t
		case *coll:
			if t, ok := v.concrete(); ok {
				terms[i] = t
				continue
			}
			all = false
		default:
			all = false
		}
	}
	if all {
		r, err := foldBuiltin(f.sd.ctx, s.Func, terms)
		if err != nil {
			if errors.Is(err, errNotFolded) {
				return []alt{{g: b.True(), v: an.opaqueUF("bi!"+s.Func, &gap{why: "builtin " + s.Func + ": " + err.Error(), at: f.loc(s)}, args...)}}, b.False()
			}
			return nil, b.True()
		}
		if r == nil {
			return nil, b.False()
		}
		return []alt{{g: b.True(), v: conc{r}}}, b.False()
	}
	if enc, ok := builtins[s.Func]; ok {
		r := enc(&bcall{f: f, s: s, args: args})
		if r.ok {
			if r.err == nil {
				r.err = b.False()
			}
			return r.alts, r.err
		}
	}
	g := &gap{why: "builtin " + s.Func + " on values of the input", at: f.loc(s)}
	return []alt{{g: an.uf("def!"+s.Func, smt.Bool, g, args...), v: an.opaqueUF("bi!"+s.Func, g, args...)}}, an.uf("err!"+s.Func, smt.Bool, g, args...)
}

var errNotFolded = errors.New("not evaluated by the analysis")

// foldBuiltin calls OPA's implementation of a builtin on constants, as
// topdown does; nil with no error is undefined.
func foldBuiltin(ctx context.Context, name string, args []*ast.Term) (out *ast.Term, err error) {
	decl, ok := ast.BuiltinMap[name]
	fn := topdown.GetBuiltin(name)
	if !ok || fn == nil || decl.Nondeterministic {
		return nil, errNotFolded
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, errNotFolded
		}
	}()
	bctx := topdown.BuiltinContext{Context: ctx}
	if decl.Relation {
		var outs []*ast.Term
		err = fn(bctx, args, func(t *ast.Term) error { outs = append(outs, t); return nil })
		if err != nil {
			return nil, err
		}
		return ast.ArrayTerm(outs...), nil
	}
	err = fn(bctx, args, func(t *ast.Term) error { out = t; return nil })
	return out, err
}
