package ireval

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"

	"github.com/arbiter-dev/arbiter/engine/input"
)

// Projection is the input walk's projection (engine/input.Projection, whose
// comment gives the rules): what the analysis below derives, and what
// Apply builds by.
type Projection = input.Projection

// InputProjection derives, from the plan, what an evaluation of p can
// observe of its input. It is conservative: anything that may see the
// whole input or a part it cannot name (a builtin or function given an
// input value, other than count and comparisons with constant scalars;
// dynamic keys; `with input`; a dynamic call; comparisons between input
// composites; input values put into composites or results) marks that
// subtree All. It returns &Projection{All: true} when the whole input is
// observable.
func (p *Program) InputProjection() *Projection {
	p.projOnce.Do(func() { p.proj = analyzeInput(p) })
	return p.proj
}

// path steps, encoded: "k<len>:<key>", "i<n>", "*".
type path string

func (pa path) key(k string) path { return pa + path("k"+strconv.Itoa(len(k))+":"+k+"/") }
func (pa path) index(i int) path  { return pa + path("i"+strconv.Itoa(i)+"/") }
func (pa path) any() path         { return pa + "*/" }

func (pa path) steps() []string {
	var out []string
	s := string(pa)
	for s != "" {
		switch s[0] {
		case 'k':
			colon := strings.IndexByte(s, ':')
			n, _ := strconv.Atoi(s[1:colon])
			out = append(out, "k"+s[colon+1:colon+1+n])
			s = s[colon+1+n+1:]
		default:
			slash := strings.IndexByte(s, '/')
			out = append(out, s[:slash])
			s = s[slash+1:]
		}
	}
	return out
}

// maxPathSteps bounds the paths the analysis follows; deeper reads mark
// their prefix All.
const maxPathSteps = 64

type markKind uint8

const (
	markExists markKind = iota + 1 // kind (and presence) observable
	markCount                      // kind and length observable
	markAll                        // everything observable
)

// info is what the analysis knows of one local at one point.
type info struct {
	paths    map[path]bool        // input values the local may hold
	consts   map[string]*ast.Term // constant scalars it may hold
	other    bool                 // it may hold anything else
	coll     bool                 // a collection the plan made
	dirtyCol bool                 // ... with a non-constant element in it
}

func (in *info) constScalar() bool {
	return in != nil && !in.other && len(in.paths) == 0 && len(in.consts) > 0
}

func (in *info) constCollection() bool {
	return in != nil && in.coll && !in.dirtyCol && len(in.paths) == 0
}

func join(a, b *info) *info {
	switch {
	case a == nil, a == b:
		return b
	case b == nil:
		return a
	}
	// A collection joined with anything else may hold anything.
	return &info{other: a.other || b.other || a.coll != b.coll, coll: a.coll && b.coll, dirtyCol: a.dirtyCol || b.dirtyCol,
		paths: joinMaps(a.paths, b.paths), consts: joinMaps(a.consts, b.consts)}
}

// joinMaps is the members of a and b, nil when there are none.
func joinMaps[K comparable, V any](a, b map[K]V) map[K]V {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[K]V, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func sameInfo(a, b *info) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	return a.other == b.other && a.coll == b.coll && a.dirtyCol == b.dirtyCol && maps.Equal(a.paths, b.paths) &&
		maps.EqualFunc(a.consts, b.consts, func(_, _ *ast.Term) bool { return true }) // constants by key
}

type absState map[ir.Local]*info

func joinStates(a, b absState) absState {
	out := maps.Clone(a)
	for k, v := range b {
		out[k] = join(out[k], v)
	}
	return out
}

func sameStates(a, b absState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !sameInfo(v, b[k]) {
			return false
		}
	}
	return true
}

// dataRoot is the path of the data document: the analysis follows reads
// of data as it follows reads of the input, below this root, so that a
// rule's reads of base documents are known too (Reads); the projection
// leaves them out.
const dataRoot path = "D/"

// The analysis answers, for a part of a plan (the whole plan, or the block
// of one rule), what it can observe of the input and of data: the one
// analysis of what a policy reads. The projection (InputProjection) and a
// decision's evidence (Reads, engine/evidence.go) are both its answers.
type analysis struct {
	strs    []string
	byName  map[string]*ir.Func
	called  []*ir.Func          // in the order first called: marks come in a fixed order
	calls   map[string][]string // by caller ("" for the entry), its callees in the order first called
	skip    string              // a function not followed (Reads: the reasons' own)
	params  map[string][]*info  // joined over call sites
	returns map[string]*info
	marks   map[path]markKind
	order   []Read // each path marked, once per function marking it, in order
	marked  map[string]bool
	whole   bool
	changed bool
	curFunc string // function being analysed, "" for the entry
}

func newAnalysis(policy *ir.Policy) *analysis {
	a := &analysis{byName: map[string]*ir.Func{}, params: map[string][]*info{}, returns: map[string]*info{}, marks: map[path]markKind{},
		calls: map[string][]string{}, marked: map[string]bool{}}
	if policy.Static != nil {
		for _, s := range policy.Static.Strings {
			a.strs = append(a.strs, s.Value)
		}
	}
	if policy.Funcs != nil {
		for _, f := range policy.Funcs.Funcs {
			a.byName[f.Name] = f
		}
	}
	return a
}

func analyzeInput(p *Program) *Projection {
	plan := planNamed(p.policy, p.entry)
	if plan == nil {
		return &Projection{All: true}
	}
	a := newAnalysis(p.policy)
	if !a.run(plan.Blocks) {
		return &Projection{All: true}
	}
	return a.projection()
}

// run analyses entry, a sequence of blocks that may read the input and
// data (Local 0 and 1, as a plan and each function have them), and every
// function it calls, and reports whether the marks are complete: false
// when the whole input is observable or the analysis did not settle.
func (a *analysis) run(entry []*ir.Block) bool {
	root, data := &info{paths: map[path]bool{"": true}}, &info{paths: map[path]bool{dataRoot: true}}
	// Functions are analysed with the join of their callers' arguments,
	// until nothing changes: summaries and marks only grow.
	for round := 0; round < 100; round++ {
		a.changed = false
		a.curFunc = ""
		st := absState{ir.Input: root, ir.Data: data}
		for _, b := range entry {
			st = joinStates(st, a.block(b, maps.Clone(st)))
		}
		for i := 0; i < len(a.called); i++ { // grows as calls are found
			f := a.called[i]
			args := a.params[f.Name]
			a.curFunc = f.Name
			fs := absState{}
			for i, l := range f.Params {
				if i < len(args) {
					fs[l] = args[i]
				}
			}
			for _, b := range f.Blocks {
				fs = joinStates(fs, a.block(b, maps.Clone(fs)))
			}
		}
		if a.whole {
			return false
		}
		if !a.changed {
			return true
		}
	}
	return false
}

func (a *analysis) mark(p path, k markKind) {
	if len(p.steps()) > maxPathSteps {
		a.whole = true
		return
	}
	if key := string(p) + "\x00" + a.curFunc; !a.marked[key] {
		a.marked[key] = true
		a.order = append(a.order, read(p, a.curFunc))
	}
	if a.marks[p] < k {
		a.marks[p] = k
		a.changed = true
	}
}

func (a *analysis) markAll(ins ...*info) { a.markPaths(markAll, ins...) }

// markPaths marks with k every input path that one of ins may hold.
func (a *analysis) markPaths(k markKind, ins ...*info) {
	for _, in := range ins {
		if in != nil {
			for p := range in.paths {
				a.mark(p, k)
			}
		}
	}
}

func (a *analysis) operand(st absState, o ir.Operand) *info {
	switch v := PlainVal(o.Value).(type) {
	case ir.Local:
		return st[v]
	case ir.StringIndex:
		if int(v) < len(a.strs) {
			return &info{consts: map[string]*ast.Term{"s" + a.strs[v]: ast.StringTerm(a.strs[v])}}
		}
	case ir.Bool:
		return &info{consts: map[string]*ast.Term{fmt.Sprint(bool(v)): ast.BooleanTerm(bool(v))}}
	}
	return &info{other: true}
}

func constInfo(t *ast.Term) *info {
	return &info{consts: map[string]*ast.Term{t.String(): t}}
}

// block analyses b from st and returns the join of the states at every
// point b may be left (any statement may be undefined).
func (a *analysis) block(b *ir.Block, st absState) absState {
	exit := maps.Clone(st)
	for _, s := range b.Stmts {
		st = a.stmt(s, st)
		exit = joinStates(exit, st)
	}
	return exit
}

func (a *analysis) stmt(s ir.Stmt, st absState) absState {
	switch s := s.(type) {
	case *ir.DotStmt:
		src, key := a.operand(st, s.Source), a.operand(st, s.Key)
		out := &info{other: true}
		if src != nil && len(src.paths) > 0 {
			out.paths = map[path]bool{}
			a.markAll(key) // an input value used as a key is read whole
			for p := range src.paths {
				if !key.constScalar() {
					a.mark(p, markAll) // a key known only at run time
					continue
				}
				for _, k := range key.consts {
					var q path
					switch kv := k.Value.(type) {
					case ast.String:
						q = p.key(string(kv))
					case ast.Number:
						if i, ok := kv.Int(); ok && i >= 0 {
							q = p.index(i)
						}
					}
					if q == "" { // a key that is neither a member's name nor an index
						a.mark(p, markAll)
						continue
					}
					a.mark(q, markExists)
					out.paths[q] = true
				}
			}
		}
		st[s.Target] = out
	case *ir.LenStmt:
		a.markPaths(markCount, a.operand(st, s.Source))
		st[s.Target] = &info{other: true}
	case *ir.ScanStmt:
		src := st[s.Source]
		val := &info{other: true}
		if src != nil && len(src.paths) > 0 {
			val.paths = map[path]bool{}
			for p := range src.paths {
				q := p.any()
				a.mark(q, markExists)
				val.paths[q] = true
			}
		}
		// The body runs any number of times: iterate to a fixpoint.
		for i, done := 0, false; !done; i++ {
			in := maps.Clone(st)
			in[s.Key], in[s.Value] = &info{other: true}, val
			next := joinStates(st, a.block(s.Block, in))
			done = sameStates(next, st) || i > 20
			st = next
		}
	case *ir.BlockStmt:
		// A block starts from the join of the states the blocks before it
		// may be left with, which is also how the statement may be left.
		for _, b := range s.Blocks {
			if b != nil {
				st = joinStates(st, a.block(b, maps.Clone(st)))
			}
		}
	case *ir.NotStmt:
		st = joinStates(st, a.block(s.Block, maps.Clone(st)))
	case *ir.WithStmt:
		if s.Local == ir.Input {
			a.whole = true // `with input`: the input is replaced, or read whole
		}
		v := a.operand(st, s.Value)
		a.markAll(v)
		in := maps.Clone(st)
		in[s.Local] = join(in[s.Local], v)
		st = joinStates(st, a.block(s.Block, in))
	case *ir.CallStmt:
		args := make([]*info, len(s.Args))
		for i, o := range s.Args {
			args[i] = a.operand(st, o)
		}
		switch f, ok := a.byName[s.Func]; {
		case s.Func == a.skip:
		case ok:
			prev := a.params[s.Func]
			merged := make([]*info, len(f.Params))
			copy(merged, prev)
			for i := range min(len(args), len(merged)) {
				merged[i] = join(merged[i], args[i])
			}
			if !slices.Contains(a.called, f) {
				a.called = append(a.called, f)
			}
			if !slices.Contains(a.calls[a.curFunc], s.Func) {
				a.calls[a.curFunc] = append(a.calls[a.curFunc], s.Func)
			}
			if !slices.EqualFunc(prev, merged, sameInfo) {
				a.params[s.Func] = merged
				a.changed = true
			}
			st[s.Result] = cmp.Or(a.returns[s.Func], &info{other: true})
			return st
		default:
			a.builtinCall(s.Func, args)
		}
		st[s.Result] = &info{other: true}
	case *ir.CallDynamicStmt:
		a.whole = true
		st[s.Result] = &info{other: true}
	case *ir.EqualStmt:
		a.compare(a.operand(st, s.A), a.operand(st, s.B))
	case *ir.NotEqualStmt:
		a.compare(a.operand(st, s.A), a.operand(st, s.B))
	case *ir.AssignVarStmt:
		st[s.Target] = a.operand(st, s.Source)
	case *ir.AssignVarOnceStmt:
		st[s.Target] = join(st[s.Target], a.operand(st, s.Source))
	case *ir.AssignIntStmt:
		st[s.Target] = constInfo(ast.InternedTerm(int(s.Value)))
	case *ir.MakeNumberIntStmt:
		st[s.Target] = constInfo(ast.InternedTerm(int(s.Value)))
	case *ir.MakeNumberRefStmt:
		if s.Index < len(a.strs) {
			st[s.Target] = constInfo(ast.NewTerm(ast.Number(a.strs[s.Index])))
		} else {
			st[s.Target] = &info{other: true}
		}
	case *ir.MakeNullStmt:
		st[s.Target] = constInfo(ast.InternedNullTerm)
	case *ir.MakeArrayStmt:
		st[s.Target] = &info{coll: true}
	case *ir.MakeSetStmt:
		st[s.Target] = &info{coll: true}
	case *ir.MakeObjectStmt:
		st[s.Target] = &info{other: true}
	case *ir.ResetLocalStmt:
		delete(st, s.Target)
	case *ir.ArrayAppendStmt:
		a.addElement(st, s.Array, a.operand(st, s.Value))
	case *ir.SetAddStmt:
		a.addElement(st, s.Set, a.operand(st, s.Value))
	case *ir.ObjectInsertStmt:
		a.markAll(a.operand(st, s.Key), a.operand(st, s.Value))
	case *ir.ObjectInsertOnceStmt:
		a.markAll(a.operand(st, s.Key), a.operand(st, s.Value))
	case *ir.ObjectMergeStmt:
		a.markAll(st[s.A], st[s.B])
		st[s.Target] = &info{other: true}
	case *ir.ReturnLocalStmt:
		if a.curFunc != "" {
			r := join(a.returns[a.curFunc], st[s.Source])
			if !sameInfo(r, a.returns[a.curFunc]) {
				a.returns[a.curFunc] = r
				a.changed = true
			}
		}
	case *ir.ResultSetAddStmt:
		a.markAll(st[s.Value])
	}
	return st
}

// compare is an equality or ordering of two values. Against a constant
// scalar, an input value shows only its kind and, when a scalar itself, its
// value: projections keep both. Anything else reads both values whole.
func (a *analysis) compare(x, y *info) {
	if !y.constScalar() {
		a.markAll(x)
	}
	if !x.constScalar() {
		a.markAll(y)
	}
}

// kindOnly are builtins whose result depends on their operand's kind alone.
var kindOnly = map[string]bool{
	"is_number": true, "is_string": true, "is_boolean": true, "is_array": true,
	"is_set": true, "is_object": true, "is_null": true, "type_name": true,
}

var comparisons = map[string]bool{"equal": true, "neq": true, "lt": true, "lte": true, "gt": true, "gte": true}

func (a *analysis) builtinCall(name string, args []*info) {
	switch {
	case name == "count" && len(args) == 1:
		a.markPaths(markCount, args[0])
	case comparisons[name] && len(args) == 2:
		a.compare(args[0], args[1])
	case name == "internal.member_2" && len(args) == 2:
		// x in {"a", "b"}: membership in constant scalars is equality
		// with each.
		if !args[1].constCollection() {
			a.markAll(args[0])
		}
		a.markAll(args[1])
	case kindOnly[name]:
	default:
		a.markAll(args...)
	}
}

// addElement is an append or set add: the element is read whole whenever
// the collection is; a collection of constant scalars stays one.
func (a *analysis) addElement(st absState, coll ir.Local, v *info) {
	a.markAll(v)
	c := st[coll]
	if c != nil && c.coll && !c.dirtyCol && !v.constScalar() {
		d := *c
		d.dirtyCol = true
		st[coll] = &d
	}
}

// projection builds the tree of the marks of the input.
func (a *analysis) projection() *Projection {
	root := &Projection{}
	for p, k := range a.marks {
		if strings.HasPrefix(string(p), string(dataRoot)) {
			continue
		}
		n := root
		for _, step := range p.steps() {
			switch {
			case step == "*":
				if n.Any == nil {
					n.Any = &Projection{}
				}
				n = n.Any
			case step[0] == 'k':
				n = below(&n.Keys, step[1:])
			default:
				i, _ := strconv.Atoi(step[1:])
				n = below(&n.Index, i)
			}
		}
		switch k {
		case markAll:
			n.All = true
		case markCount:
			n.Count = true
		}
	}
	return input.Normalize(root)
}

// below is the projection at k of *m, made (with the map) when missing.
func below[K comparable](m *map[K]*Projection, k K) *Projection {
	if *m == nil {
		*m = map[K]*Projection{}
	}
	if (*m)[k] == nil {
		(*m)[k] = &Projection{}
	}
	return (*m)[k]
}

// Apply builds doc (a JSON value as encoding/json decodes it with
// UseNumber, or as the engine's strict decoder does) under p, following
// the rules of Projection. It is the reference for any builder that
// applies a projection while parsing, and what the projection's
// differential tests evaluate.
func Apply(doc any, p *Projection) (ast.Value, error) {
	if p == nil || p.All {
		return ast.InterfaceToValue(doc)
	}
	switch v := doc.(type) {
	case map[string]any:
		if len(p.Index) > 0 {
			return ast.InterfaceToValue(doc) // read as an array somewhere
		}
		obj := ast.NewObjectWithCapacity(len(v))
		for k, x := range v {
			var sub *Projection
			switch {
			case p.Keys[k] != nil:
				sub = p.Keys[k]
			case p.Any != nil:
				sub = p.Any
			case p.Count:
				obj.Insert(ast.StringTerm(k), ast.InternedNullTerm)
				continue
			default:
				continue
			}
			m, err := Apply(x, sub)
			if err != nil {
				return nil, err
			}
			obj.Insert(ast.StringTerm(k), ast.NewTerm(m))
		}
		return obj, nil
	case []any:
		if len(p.Keys) > 0 {
			return ast.InterfaceToValue(doc) // read as an object somewhere
		}
		elems := make([]*ast.Term, len(v))
		for i, x := range v {
			sub := cmp.Or(p.Index[i], p.Any)
			if sub == nil {
				elems[i] = ast.InternedNullTerm
				continue
			}
			e, err := Apply(x, sub)
			if err != nil {
				return nil, err
			}
			elems[i] = ast.NewTerm(e)
		}
		return ast.NewArray(elems...), nil
	default:
		return ast.InterfaceToValue(doc)
	}
}
