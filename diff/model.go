package diff

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// tidy are constraints that make a model small and complete enough to be
// written as a document: no members but those the analysis names, arrays
// of at most two elements (none where nothing constrains them), and the
// elements there valid. They only steer the search for an example: a
// question they make unsatisfiable is asked again without them.
func (an *analysis) tidy() []*smt.Term {
	b := an.vs.b
	var out []*smt.Term
	done := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, t := range append([]*tmpl(nil), an.m.all...) {
			for _, idx := range indexTuples(b, t.arity, 2) {
				n := &node{t: t, idx: idx}
				if done[n.key()] || strings.HasPrefix(t.key, "\x00") {
					continue
				}
				done[n.key()] = true
				changed = true
				x := an.m.x(n)
				if t.sized {
					// Members the analysis does not name, where the schema
					// admits them: a count that needs them can be met.
					for i := range 2 {
						an.m.child(t, fmt.Sprintf("%s%d", extraKey, i))
					}
					an.m.element(t)
				}
				present := an.m.present(n)
				out = append(out, b.Not(an.vs.is("vtok", x)), b.Not(an.vs.is("vset", x)),
					b.Implies(an.vs.is("vobj", x), b.Eq(an.vs.field("vo", smt.Int, x), b.Add(smt.Int, present...))))
				length := an.vs.field("va", smt.Int, x)
				if t.elem == nil {
					out = append(out, b.Implies(an.vs.is("varr", x), b.Eq(length, b.IntLit(0))))
					continue
				}
				out = append(out, b.Implies(an.vs.is("varr", x), b.And(b.Cmp(">=", length, b.IntLit(0)), b.Cmp("<=", length, b.IntLit(2)))))
				for i := range 2 {
					e := an.m.at(n, b.IntLit(int64(i)))
					for s := range 2 {
						out = append(out, an.assumeValid(e, s))
					}
				}
				for _, k := range t.order {
					if strings.HasPrefix(k, extraKey) {
						for s := range 2 {
							out = append(out, an.assumeValid(an.m.member(n, k), s))
						}
					}
				}
			}
		}
	}
	return out
}

// extraKey names the members an example adds to an object whose length a
// revision reads.
const extraKey = "arbiter-extra-"

// indexTuples are every tuple of n indices below k.
func indexTuples(b *smt.Builder, n, k int) [][]*smt.Term {
	out := [][]*smt.Term{nil}
	for range n {
		var next [][]*smt.Term
		for _, t := range out {
			for i := range k {
				next = append(next, append(append([]*smt.Term(nil), t...), b.IntLit(int64(i))))
			}
		}
		out = next
	}
	return out
}

// document reads the input document of the solver's model.
func (an *analysis) document(sol *smt.Solver) ([]byte, error) {
	v, _, err := an.readNode(sol, an.m.rootNode(), 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func (an *analysis) readNode(sol *smt.Solver, n *node, depth int) (any, bool, error) {
	b := an.vs.b
	if depth > 64 {
		return nil, false, fmt.Errorf("the model nests deeper than 64")
	}
	vals, err := sol.Values([]*smt.Term{an.m.d(n), an.m.x(n)})
	if err != nil {
		return nil, false, err
	}
	if vals[0] == nil || vals[0].Atom != "true" {
		return nil, false, nil
	}
	x := vals[1]
	if x == nil {
		// Nothing constrains the value: the shape its members need.
		switch {
		case len(n.t.order) > 0 || n.t.parent == nil:
			x = &smt.SExpr{List: []*smt.SExpr{{Atom: "vobj"}, {Atom: "0"}}}
		case n.t.elem != nil:
			x = &smt.SExpr{List: []*smt.SExpr{{Atom: "varr"}, {Atom: "0"}}}
		default:
			x = &smt.SExpr{Atom: "vnull"}
		}
	}
	ctor, arg := x.Atom, (*smt.SExpr)(nil)
	if len(x.List) == 2 {
		ctor, arg = x.List[0].Atom, x.List[1]
	}
	switch ctor {
	case "vnull":
		return nil, true, nil
	case "vbool":
		return arg.Atom == "true", true, nil
	case "vnum":
		r, err := realOf(arg)
		if err != nil {
			return nil, false, err
		}
		return json.Number(decimal(r)), true, nil
	case "vstr":
		s, err := smt.DecodeString(arg.Atom)
		return s, true, err
	case "varr":
		k, err := strconv.Atoi(arg.Atom)
		if !n.t.sized {
			k, err = 0, nil // nothing reads its length: any will do
		}
		if err != nil || k < 0 || k > 1024 {
			return nil, false, fmt.Errorf("the model has an array of length %s", arg)
		}
		out := make([]any, k)
		if n.t.elem == nil {
			return out, true, nil
		}
		for i := range k {
			v, ok, err := an.readNode(sol, an.m.at(n, b.IntLit(int64(i))), depth+1)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out[i] = v
			}
		}
		return out, true, nil
	case "vobj":
		out := map[string]any{}
		for _, k := range n.t.order {
			if strings.HasPrefix(k, "\x00") {
				continue
			}
			v, ok, err := an.readNode(sol, an.m.member(n, k), depth+1)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out[k] = v
			}
		}
		return out, true, nil
	}
	return nil, true, nil // vtok, vset: not JSON; the example will not confirm
}

// realOf reads a solver's rational: 5.0, (- 5.0), (/ 1.0 3.0), (- (/ 1 3)).
func realOf(e *smt.SExpr) (*big.Rat, error) {
	if e.List == nil {
		r, ok := new(big.Rat).SetString(e.Atom)
		if !ok {
			return nil, fmt.Errorf("not a number: %s", e.Atom)
		}
		return r, nil
	}
	switch {
	case len(e.List) == 2 && e.List[0].Atom == "-":
		r, err := realOf(e.List[1])
		if err != nil {
			return nil, err
		}
		return r.Neg(r), nil
	case len(e.List) == 3 && e.List[0].Atom == "/":
		n, err := realOf(e.List[1])
		if err != nil {
			return nil, err
		}
		d, err := realOf(e.List[2])
		if err != nil || d.Sign() == 0 {
			return nil, fmt.Errorf("not a number: %s", e)
		}
		return n.Quo(n, d), nil
	}
	return nil, fmt.Errorf("not a number: %s", e)
}

// decimal writes r as a JSON number: exactly when it has a finite decimal
// expansion, else to 30 places (an example that then may not confirm).
func decimal(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	d := new(big.Int).Set(r.Denom())
	places := 0
	for _, p := range []int64{2, 5} {
		bp := big.NewInt(p)
		for new(big.Int).Mod(d, bp).Sign() == 0 {
			d.Quo(d, bp)
			places++
		}
	}
	if d.Cmp(big.NewInt(1)) == 0 {
		return strings.TrimRight(strings.TrimRight(r.FloatString(places), "0"), ".")
	}
	return r.FloatString(30)
}
