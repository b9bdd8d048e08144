package diff

import (
	"github.com/crillab/gophersat/solver"
)

// F is a Boolean formula over the choice variables, a node of a builder.
// The builder shares equal sub-formulas, so that a guard repeated across
// many alternatives costs one node.
type F int32

// The two constants are nodes 0 and 1 of every builder.
const (
	False F = 0
	True  F = 1
)

type fop uint8

const (
	opConst fop = iota
	opVar
	opNot
	opAnd
	opOr
)

type fnode struct {
	op   fop
	a, b F
	v    int // opVar: the choice variable, 1-based
}

type builder struct {
	nodes []fnode
	memo  map[fnode]F
	vars  int
}

func newBuilder() *builder {
	b := &builder{memo: map[fnode]F{}}
	b.nodes = []fnode{{op: opConst}, {op: opConst}}
	return b
}

func (b *builder) add(n fnode) F {
	if f, ok := b.memo[n]; ok {
		return f
	}
	f := F(len(b.nodes))
	b.nodes = append(b.nodes, n)
	b.memo[n] = f
	return f
}

// newVar returns a fresh choice variable.
func (b *builder) newVar() F {
	b.vars++
	return b.add(fnode{op: opVar, v: b.vars})
}

func (b *builder) not(a F) F {
	switch {
	case a == True:
		return False
	case a == False:
		return True
	case b.nodes[a].op == opNot:
		return b.nodes[a].a
	}
	return b.add(fnode{op: opNot, a: a})
}

func (b *builder) and(x, y F) F {
	switch {
	case x == False || y == False:
		return False
	case x == True:
		return y
	case y == True || x == y:
		return x
	case x == b.not(y):
		return False
	}
	if x > y {
		x, y = y, x
	}
	return b.add(fnode{op: opAnd, a: x, b: y})
}

func (b *builder) or(x, y F) F {
	return b.not(b.and(b.not(x), b.not(y)))
}

func (b *builder) ors(fs []F) F {
	r := False
	for _, f := range fs {
		r = b.or(r, f)
	}
	return r
}

// solve looks for an assignment of the choice variables that satisfies
// every formula of all. It returns the value of each choice variable
// (indexed by variable, 1-based) or nil when there is none: an Unsat
// answer of the solver is the proof behind a verdict none.
func (b *builder) solve(all []F) []bool {
	// Tseitin: SAT variable n+1 stands for node n; choice variables keep
	// their nodes' numbers.
	lit := func(f F) int { return int(f) + 1 }
	var cnf [][]int
	seen := make([]bool, len(b.nodes))
	var visit func(F)
	visit = func(f F) {
		if seen[f] {
			return
		}
		seen[f] = true
		n := b.nodes[f]
		x := lit(f)
		switch n.op {
		case opConst:
			if f == True {
				cnf = append(cnf, []int{x})
			} else {
				cnf = append(cnf, []int{-x})
			}
		case opNot:
			visit(n.a)
			cnf = append(cnf, []int{x, lit(n.a)}, []int{-x, -lit(n.a)})
		case opAnd:
			visit(n.a)
			visit(n.b)
			cnf = append(cnf, []int{-x, lit(n.a)}, []int{-x, lit(n.b)}, []int{x, -lit(n.a), -lit(n.b)})
		}
	}
	for _, f := range all {
		visit(f)
		cnf = append(cnf, []int{lit(f)})
	}
	visit(True)
	visit(False)
	s := solver.New(solver.ParseSliceNb(cnf, len(b.nodes)))
	if s.Solve() != solver.Sat {
		return nil
	}
	model := s.Model()
	out := make([]bool, b.vars+1)
	for f, n := range b.nodes {
		if n.op == opVar && f < len(model) {
			out[n.v] = model[f]
		}
	}
	return out
}
