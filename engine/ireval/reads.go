package ireval

import (
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ir"
)

// Read is one value that a rule's body reads, as the analysis of the plan
// finds it (projection.go): a path below the input, or below data, cut at
// the first element or member chosen at run time (input.a.b[x] reads
// input.a.b whole).
type Read struct {
	Path []string // tokens below input, or below data
	Data bool     // a read of data (a base document), not of the input
	// Via is the plan function whose body reads it ("g0.data.lib.f"), ""
	// when the rule's own body does.
	Via string
}

func read(p path, via string) Read {
	r := Read{Via: via}
	for _, step := range p.steps() {
		switch step {
		case "D":
			r.Data = true
		case "*":
			return r
		default: // k<key> or i<index>
			r.Path = append(r.Path, step[1:])
		}
	}
	return r
}

// RuleReads finds the body of the rule whose head is at file:row in the
// plan (a function's blocks that begin there) and analyses what it reads
// of the input and of data, directly or through the functions (rules) it
// calls, but not through its own function: a rule that reads the set its
// siblings build reads theirs only as one value. Reads come in the order
// the analysis meets them, each once, without one that a longer one below
// it covers: a rule that tests that input.a is there and compares input.a.b
// reads input.a.b. ok is false when no body begins there; a body that may
// observe the whole input reads the input's root.
func RuleReads(policy *ir.Policy, file string, row int) (fn string, reads []Read, ok bool) {
	fileIndex := -1
	if policy.Static != nil {
		for i, f := range policy.Static.Files {
			if f.Value == file {
				fileIndex = i
			}
		}
	}
	if fileIndex < 0 || policy.Funcs == nil {
		return "", nil, false
	}
	for _, f := range policy.Funcs.Funcs {
		var body []*ir.Block
		for _, b := range f.Blocks {
			if len(b.Stmts) > 0 {
				if l := b.Stmts[0].GetLocation(); l != nil && l.File == fileIndex && l.Row == row {
					body = append(body, b)
				}
			}
		}
		if len(body) == 0 {
			continue
		}
		a := newAnalysis(policy)
		a.skip = f.Name
		if !a.run(body) {
			return f.Name, []Read{{}}, true
		}
		return f.Name, prune(a.sourceOrder()), true
	}
	return "", nil, false
}

// sourceOrder is a.order as a reader of the source meets the reads: the
// body's own first, then each function's, depth first in the order they
// are called (the order of marks is the analysis's, which visits every
// function called once per round).
func (a *analysis) sourceOrder() []Read {
	rank := map[string]int{}
	var visit func(fn string)
	visit = func(fn string) {
		if _, ok := rank[fn]; ok {
			return
		}
		rank[fn] = len(rank)
		for _, callee := range a.calls[fn] {
			visit(callee)
		}
	}
	visit("")
	out := slices.Clone(a.order)
	slices.SortStableFunc(out, func(x, y Read) int { return rank[x.Via] - rank[y.Via] })
	return out
}

// prune keeps the first of equal reads, and drops a read when a longer one
// below it is listed.
func prune(reads []Read) []Read {
	key := func(r Read) string { return strconv.FormatBool(r.Data) + "\x00" + strings.Join(r.Path, "\x00") }
	seen := map[string]bool{}
	var uniq []Read
	for _, r := range reads {
		if !seen[key(r)] {
			seen[key(r)] = true
			uniq = append(uniq, r)
		}
	}
	out := uniq[:0:0]
	for _, r := range uniq {
		below := func(o Read) bool {
			return o.Data == r.Data && len(o.Path) > len(r.Path) && slices.Equal(o.Path[:len(r.Path)], r.Path)
		}
		if !slices.ContainsFunc(uniq, below) {
			out = append(out, r)
		}
	}
	return out
}
