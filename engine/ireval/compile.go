package ireval

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Unsupported is returned by Compile for a plan the evaluator does not run:
// the decision then stays on topdown, and Reason says why.
type Unsupported struct {
	Reason string
}

func (u *Unsupported) Error() string { return "not compiled: " + u.Reason }

func unsupported(format string, args ...any) error {
	return &Unsupported{Reason: fmt.Sprintf(format, args...)}
}

// Program is one plan of an ir.Policy compiled to Go closures over
// ast.Values. It is immutable and safe for concurrent use.
type Program struct {
	entry     string
	blocks    []block // the plan's blocks
	nlocal    int     // locals of the plan's frame
	stackSize int     // locals live at once on the deepest call chain
	nmemo     int     // memoized functions
	maxArgs   int     // most operands of one builtin call
	data      *ast.Term
	policy    *ir.Policy
	funcs     []*function // every function reachable from the plan
	pool      sync.Pool   // of *state
	projOnce  sync.Once
	proj      *Projection
}

// Functions lists the plan functions p can call, by name
// ("g0.data.decisions.x.rule"), sorted.
func (p *Program) Functions() []string {
	out := make([]string, len(p.funcs))
	for i, f := range p.funcs {
		out[i] = f.name
	}
	return out
}

// stmt runs one statement on the frame l. It returns next to go on with the
// following statement, k >= 0 to leave k+1 enclosing blocks (0: the
// current block ends, which is how a statement is "undefined"), fail when
// evaluation must stop (the state holds the error), or ret when a function
// returned (the state holds the value).
type stmt func(st *state, l []*ast.Term) int

// setLocal is the statement that sets local t to the constant v (nil
// resets it) and goes on.
func setLocal(t int, v *ast.Term, next int) stmt {
	return func(_ *state, l []*ast.Term) int {
		l[t] = v
		return next
	}
}

type block []stmt

const (
	next = -1
	fail = -2
	ret  = -3
)

func (b block) run(st *state, l []*ast.Term) int {
	for _, s := range b {
		if r := s(st, l); r != next {
			return r
		}
	}
	return next
}

// function is a compiled ir.Func.
type function struct {
	name   string
	params []int
	nlocal int
	blocks []block
	memo   int // memo slot of a function of (input, data) alone, or -1
	callee map[*function]bool
	dyn    bool // calls any function through CallDynamicStmt
}

// operand is a compiled ir.Operand: a local, or a constant.
type operand struct {
	local int // -1 for a constant
	c     *ast.Term
}

func (o operand) get(l []*ast.Term) *ast.Term {
	if o.local >= 0 {
		return l[o.local]
	}
	return o.c
}

// compiler holds what compiling one Program needs.
type compiler struct {
	policy  *ir.Policy
	strs    []*ast.Term // static strings as terms
	funcs   map[string]*ir.Func
	built   map[string]*function
	busy    map[string]bool      // functions being compiled
	dynamic map[string]*function // by CallDynamicStmt path
	nmemo   int
	maxArgs int
	// cur is the function being compiled, nil for the plan; scope is the
	// function whose callees the statements compiled now add to (a stand-in
	// for the plan's).
	cur, scope *function
	// err is the first operand of the statement being compiled that did
	// not compile (stmt returns it).
	err error
}

// Compile compiles the plan named entry of policy. data is the whole data
// document as topdown reads it from the store (Local 1 of the plan); it is
// shared, never modified. A plan with any statement, builtin or shape the
// evaluator does not implement is refused with *Unsupported.
func Compile(policy *ir.Policy, entry string, data ast.Value) (prog *Program, err error) {
	defer func() {
		// Compiling walks a plan made by OPA's planner; a plan this code
		// misreads must refuse, never take the process down.
		if r := recover(); r != nil {
			prog, err = nil, unsupported("compiling the plan failed: %v", r)
		}
	}()
	if policy == nil || policy.Plans == nil {
		return nil, unsupported("empty policy")
	}
	plan := planNamed(policy, entry)
	if plan == nil {
		return nil, unsupported("no plan named %q", entry)
	}
	top := &function{callee: map[*function]bool{}} // the plan's callees
	c := &compiler{policy: policy, funcs: map[string]*ir.Func{}, built: map[string]*function{}, busy: map[string]bool{}, dynamic: map[string]*function{}, scope: top}
	if policy.Static != nil {
		for _, s := range policy.Static.Strings {
			c.strs = append(c.strs, ast.StringTerm(s.Value))
		}
	}
	if policy.Funcs != nil {
		for _, f := range policy.Funcs.Funcs {
			c.funcs[f.Name] = f
		}
		// CallDynamicStmt dispatches on a function's path: compile every
		// function that has one up front when the plan may need them.
		if usesDynamicCalls(policy) {
			for _, f := range policy.Funcs.Funcs {
				if len(f.Path) == 0 {
					continue
				}
				fn, err := c.function(f.Name)
				if err != nil {
					return nil, err
				}
				c.dynamic[strings.Join(f.Path, "\x00")] = fn
			}
		}
	}
	p := &Program{entry: entry, policy: policy, nlocal: frameSize(plan.Blocks, ir.Data)}
	if data != nil {
		p.data = ast.NewTerm(data)
	}
	for _, b := range plan.Blocks {
		cb, err := c.block(b, 1)
		if err != nil {
			return nil, err
		}
		p.blocks = append(p.blocks, cb)
	}
	// The deepest chain of live frames bounds the locals of one
	// evaluation; Rego has no recursion, and a cycle would be a planner bug.
	need := map[*function]int{}
	var depth func(f *function, seen map[*function]bool) (int, error)
	depth = func(f *function, seen map[*function]bool) (int, error) {
		if n, ok := need[f]; ok {
			return n, nil
		}
		if seen[f] {
			return 0, unsupported("function %s calls itself", f.name)
		}
		seen[f] = true
		deepest := 0
		callees := f.callee
		if f.dyn {
			callees = maps.Clone(callees)
			for _, g := range c.dynamic {
				callees[g] = true
			}
		}
		for g := range callees {
			if seen[g] && !f.callee[g] {
				// Only a dynamic call leads back here: the table holds
				// every function, this one's callers included. Rego has
				// no recursion; the stack grows should a plan do it.
				continue
			}
			n, err := depth(g, seen)
			if err != nil {
				return 0, err
			}
			deepest = max(deepest, n)
		}
		delete(seen, f)
		need[f] = f.nlocal + deepest
		return need[f], nil
	}
	// The plan is a frame of no locals of its own here: they are nlocal.
	n, err := depth(top, map[*function]bool{})
	if err != nil {
		return nil, err
	}
	p.stackSize = p.nlocal + n
	p.nmemo = c.nmemo
	p.maxArgs = c.maxArgs
	p.funcs = slices.SortedFunc(maps.Values(c.built), func(a, b *function) int { return strings.Compare(a.name, b.name) })
	return p, nil
}

// planNamed is the plan of policy named name, the last one of that name,
// or nil.
func planNamed(policy *ir.Policy, name string) *ir.Plan {
	var plan *ir.Plan
	for _, pl := range policy.Plans.Plans {
		if pl.Name == name {
			plan = pl
		}
	}
	return plan
}

// frameSize is the number of locals a frame running blocks needs, at
// least enough for the named ones.
func frameSize(blocks []*ir.Block, named ...ir.Local) int {
	n := 0
	for _, l := range named {
		n = max(n, int(l))
	}
	for _, b := range blocks {
		walkLocals(b, func(l ir.Local) { n = max(n, int(l)) })
	}
	return n + 1
}

// usesDynamicCalls reports whether policy, which has functions, calls one dynamically.
func usesDynamicCalls(policy *ir.Policy) bool {
	if policy.Funcs == nil {
		return false
	}
	var blocks []*ir.Block
	for _, pl := range policy.Plans.Plans {
		blocks = append(blocks, pl.Blocks...)
	}
	for _, f := range policy.Funcs.Funcs {
		blocks = append(blocks, f.Blocks...)
	}
	return slices.ContainsFunc(blocks, contains[*ir.CallDynamicStmt])
}

// function compiles the named plan function once.
func (c *compiler) function(name string) (*function, error) {
	if c.busy[name] {
		return nil, unsupported("function %s calls itself", name)
	}
	if fn, ok := c.built[name]; ok {
		return fn, nil
	}
	f, ok := c.funcs[name]
	if !ok {
		return nil, unsupported("call of %s, which is neither a plan function nor a builtin", name)
	}
	if len(f.Params) < 2 {
		return nil, unsupported("function %s takes %d parameters; plan functions take input and data first", name, len(f.Params))
	}
	fn := &function{name: name, memo: -1, callee: map[*function]bool{}}
	c.busy[name] = true
	defer delete(c.busy, name)
	saved, scope := c.cur, c.scope
	c.cur, c.scope = fn, fn
	defer func() { c.cur, c.scope = saved, scope }()
	for i, b := range f.Blocks {
		// ReturnLocalStmt may only end the function, at its top level.
		if i < len(f.Blocks)-1 && contains[*ir.ReturnLocalStmt](b) {
			return nil, unsupported("function %s returns before its last block", name)
		}
		cb, err := c.block(b, 1)
		if err != nil {
			return nil, err
		}
		fn.blocks = append(fn.blocks, cb)
	}
	if len(f.Blocks) == 0 || !endsWithReturn(f.Blocks[len(f.Blocks)-1]) {
		return nil, unsupported("function %s does not end with a return", name)
	}
	for _, p := range f.Params {
		fn.params = append(fn.params, int(p))
	}
	fn.nlocal = frameSize(f.Blocks, append([]ir.Local{f.Return}, f.Params...)...)
	c.built[name] = fn
	if len(f.Params) == 2 {
		// A function of input and data alone: memoized per evaluation, as
		// OPA's Wasm target does, and reset inside `with`.
		fn.memo = c.nmemo
		c.nmemo++
	}
	return fn, nil
}

// contains reports whether b holds a statement of type T, nested ones
// included.
func contains[T ir.Stmt](b *ir.Block) bool {
	found := false
	walkStmts(b, func(s ir.Stmt) {
		if _, ok := s.(T); ok {
			found = true
		}
	})
	return found
}

func endsWithReturn(b *ir.Block) bool {
	if len(b.Stmts) == 0 {
		return false
	}
	_, ok := b.Stmts[len(b.Stmts)-1].(*ir.ReturnLocalStmt)
	return ok
}

// block compiles b. depth counts the blocks between b's statements and the
// nearest boundary (a function's or plan's top-level block, the body of a
// scan, a not or a with), b included: no break may leave that boundary.
func (c *compiler) block(b *ir.Block, depth int) (block, error) {
	out := make(block, 0, len(b.Stmts))
	for _, s := range b.Stmts {
		cs, err := c.stmt(s, depth)
		if err != nil {
			return nil, err
		}
		out = append(out, cs)
	}
	return out, nil
}

// PlainVal reads an operand's value, which a plan read back from JSON holds
// by pointer.
func PlainVal(v ir.Val) ir.Val {
	switch x := v.(type) {
	case *ir.Local:
		return *x
	case *ir.StringIndex:
		return *x
	case *ir.Bool:
		return *x
	}
	return v
}

// op compiles an operand; one that does not compile is kept in c.err.
func (c *compiler) op(o ir.Operand) operand {
	switch v := PlainVal(o.Value).(type) {
	case ir.Local:
		return operand{local: int(v)}
	case ir.StringIndex:
		return operand{local: -1, c: c.str(int(v))}
	case ir.Bool:
		return operand{local: -1, c: ast.InternedTerm(bool(v))}
	default:
		c.fail(unsupported("operand of type %T", o.Value))
		return operand{}
	}
}

func (c *compiler) ops(os []ir.Operand) []operand {
	out := make([]operand, len(os))
	for i, o := range os {
		out[i] = c.op(o)
	}
	return out
}

// str is static string i; one out of range is kept in c.err.
func (c *compiler) str(i int) *ast.Term {
	if i < 0 || i >= len(c.strs) {
		c.fail(unsupported("string constant %d out of range", i))
		return ast.InternedNullTerm
	}
	return c.strs[i]
}

func (c *compiler) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// stmt compiles one statement: a statement of control, or one of values.
func (c *compiler) stmt(s ir.Stmt, depth int) (stmt, error) {
	out, err := c.control(s, depth)
	if out == nil && err == nil {
		out = c.value(s)
	}
	if err == nil {
		err = c.err
	}
	c.err = nil
	if out == nil && err == nil {
		err = unsupported("statement %T", s)
	}
	return out, err
}

// control compiles a statement that runs blocks, calls or leaves them; it
// returns nil for any other.
func (c *compiler) control(s ir.Stmt, depth int) (stmt, error) {
	switch s := s.(type) {
	case *ir.NopStmt:
		return func(*state, []*ast.Term) int { return next }, nil

	case *ir.BreakStmt:
		if int(s.Index) >= depth {
			return nil, unsupported("break %d leaves its scope", s.Index)
		}
		n := int(s.Index)
		return func(*state, []*ast.Term) int { return n }, nil

	case *ir.ReturnLocalStmt:
		if c.cur == nil || depth != 1 {
			return nil, unsupported("return outside a function's top level")
		}
		src := int(s.Source)
		return func(st *state, l []*ast.Term) int {
			st.retval = l[src]
			return ret
		}, nil

	case *ir.ResultSetAddStmt:
		if c.cur != nil {
			return nil, unsupported("result set add inside a function")
		}
		v := int(s.Value)
		return func(st *state, l []*ast.Term) int {
			t := l[v]
			if t == nil {
				return 0
			}
			if _, ok := t.Value.(ast.Object); !ok {
				return 0
			}
			st.results = append(st.results, t)
			return next
		}, nil

	case *ir.BlockStmt:
		var blocks []block
		for _, b := range s.Blocks {
			if b == nil {
				continue
			}
			cb, err := c.block(b, depth+1)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, cb)
		}
		return func(st *state, l []*ast.Term) int {
			for _, b := range blocks {
				switch r := b.run(st, l); {
				case r == next || r == 0:
				case r > 0:
					return r - 1
				default:
					return r
				}
			}
			return next
		}, nil

	case *ir.ScanStmt:
		body, err := c.block(s.Block, 1)
		return scanStmt(int(s.Source), int(s.Key), int(s.Value), body), err

	case *ir.NotStmt:
		body, err := c.block(s.Block, 1)
		return func(st *state, l []*ast.Term) int {
			switch r := body.run(st, l); r {
			case next:
				return 0 // the negated block held: not is undefined
			case 0:
				return next
			default:
				return r
			}
		}, err

	case *ir.WithStmt:
		body, err := c.block(s.Block, 1)
		if err != nil {
			return nil, err
		}
		path := make([]*ast.Term, len(s.Path))
		for i, idx := range s.Path {
			path[i] = c.str(idx)
		}
		return withStmt(int(s.Local), path, c.op(s.Value), body), nil

	case *ir.CallStmt:
		return c.call(s)

	case *ir.CallDynamicStmt:
		if depth <= 3 {
			return nil, unsupported("dynamic call outside the planner's block structure")
		}
		c.scope.dyn = true
		return c.callDynamic(c.ops(s.Path), s.Args, int(s.Result)), nil
	}
	return nil, nil
}

// value compiles a statement that reads, tests, makes or fills locals; it
// returns nil for any other.
func (c *compiler) value(s ir.Stmt) stmt {
	switch s := s.(type) {
	case *ir.DotStmt:
		src, key, target := c.op(s.Source), c.op(s.Key), int(s.Target)
		return func(_ *state, l []*ast.Term) int {
			return set(l, target, Dot(src.get(l), key.get(l)))
		}

	case *ir.LenStmt:
		src, target := c.op(s.Source), int(s.Target)
		return func(_ *state, l []*ast.Term) int {
			t := src.get(l)
			if t == nil {
				return 0
			}
			var n int
			switch v := t.Value.(type) {
			case *ast.Array:
				n = v.Len()
			case ast.Object:
				n = v.Len()
			case ast.Set:
				n = v.Len()
			default:
				return 0
			}
			l[target] = ast.InternedTerm(n)
			return next
		}

	case *ir.EqualStmt:
		return c.equal(s.A, s.B, true)
	case *ir.NotEqualStmt:
		return c.equal(s.A, s.B, false)

	case *ir.IsArrayStmt:
		return c.isKind(s.Source, func(v ast.Value) bool { _, ok := v.(*ast.Array); return ok })
	case *ir.IsObjectStmt:
		return c.isKind(s.Source, func(v ast.Value) bool { _, ok := v.(ast.Object); return ok })
	case *ir.IsSetStmt:
		return c.isKind(s.Source, func(v ast.Value) bool { _, ok := v.(ast.Set); return ok })
	case *ir.IsDefinedStmt:
		src := int(s.Source)
		return func(_ *state, l []*ast.Term) int { return holds(l[src] != nil) }
	case *ir.IsUndefinedStmt:
		src := int(s.Source)
		return func(_ *state, l []*ast.Term) int { return holds(l[src] == nil) }

	case *ir.ResetLocalStmt:
		return setLocal(int(s.Target), nil, next)

	case *ir.AssignIntStmt:
		return setLocal(int(s.Target), ast.InternedTerm(int(s.Value)), next)

	case *ir.AssignVarStmt:
		src, t := c.op(s.Source), int(s.Target)
		return func(_ *state, l []*ast.Term) int {
			l[t] = src.get(l)
			return next
		}

	case *ir.AssignVarOnceStmt:
		src, t := c.op(s.Source), int(s.Target)
		return func(st *state, l []*ast.Term) int {
			v := src.get(l)
			if cur := l[t]; cur != nil {
				if v == nil || ast.Compare(cur.Value, v.Value) != 0 {
					return st.conflict("complete rules must not produce multiple outputs")
				}
				return next
			}
			l[t] = v
			return next
		}

	case *ir.MakeNullStmt:
		return setLocal(int(s.Target), ast.InternedNullTerm, next)

	case *ir.MakeNumberIntStmt:
		return setLocal(int(s.Target), ast.InternedTerm(int(s.Value)), next)

	case *ir.MakeNumberRefStmt:
		// The literal as the parser read it: topdown's constant term.
		lit, _ := c.str(s.Index).Value.(ast.String)
		return setLocal(int(s.Target), ast.NewTerm(ast.Number(lit)), next)

	case *ir.MakeArrayStmt:
		n := int(max(s.Capacity, 0))
		return makeFresh(s.Target, func() ast.Value { return ast.NewArrayWithCapacity(n) })
	case *ir.MakeObjectStmt:
		return makeFresh(s.Target, func() ast.Value { return ast.NewObject() })
	case *ir.MakeSetStmt:
		return makeFresh(s.Target, func() ast.Value { return ast.NewSet() })
	}
	return c.compose(s)
}

// compose compiles a statement that adds to a composite the plan made, or
// merges two objects; it returns nil for any other.
func (c *compiler) compose(s ir.Stmt) stmt {
	switch s := s.(type) {
	case *ir.ArrayAppendStmt:
		v := c.op(s.Value)
		return grow(s.Array, "array append to", v, v, func(st *state, t *ast.Term, a *ast.Array, v, _ *ast.Term) int {
			t.Value = a.Append(v)
			return next
		})

	case *ir.SetAddStmt:
		v := c.op(s.Value)
		return grow(s.Set, "set add to", v, v, func(st *state, _ *ast.Term, sv ast.Set, v, _ *ast.Term) int {
			sv.Add(v)
			return next
		})

	case *ir.ObjectInsertStmt:
		return c.insert(s.Object, s.Key, s.Value, false)
	case *ir.ObjectInsertOnceStmt:
		return c.insert(s.Object, s.Key, s.Value, true)

	case *ir.ObjectMergeStmt:
		a, b, t := int(s.A), int(s.B), int(s.Target)
		return func(st *state, l []*ast.Term) int {
			x, y := l[a], l[b]
			if x == nil || y == nil {
				return 0
			}
			xo, ok1 := x.Value.(ast.Object)
			yo, ok2 := y.Value.(ast.Object)
			if !ok1 || !ok2 {
				return st.internal("merge of values that are not both objects")
			}
			m, ok := mergeObjects(xo, yo)
			if !ok {
				return st.internal("base and virtual documents overlap")
			}
			l[t] = ast.NewTerm(m)
			return next
		}
	}
	return nil
}

func (c *compiler) insert(obj ir.Local, k, v ir.Operand, once bool) stmt {
	return grow(obj, "object insert into", c.op(k), c.op(v), func(st *state, _ *ast.Term, m ast.Object, kt, vt *ast.Term) int {
		if once {
			if cur := m.Get(kt); cur != nil && ast.Compare(cur.Value, vt.Value) != 0 {
				return st.conflict("object keys must be unique")
			}
		}
		m.Insert(kt, vt)
		return next
	})
}

// grow is a statement that adds the values of a and b (the same operand
// twice for a statement of one value) to the composite of type T in local
// x, which the plan must have made (fresh): input, data and builtin
// results are never modified. An undefined value makes the statement
// undefined.
func grow[T ast.Value](x ir.Local, what string, a, b operand, add func(st *state, t *ast.Term, v T, a, b *ast.Term) int) stmt {
	i := int(x)
	return func(st *state, l []*ast.Term) int {
		t, av, bv := l[i], a.get(l), b.get(l)
		if t == nil || av == nil || bv == nil {
			return 0
		}
		v, ok := t.Value.(T)
		if !ok || t.Location != fresh {
			return st.internal(what + " a value the plan did not make")
		}
		return add(st, t, v, av, bv)
	}
}

func (c *compiler) equal(a, b ir.Operand, want bool) stmt {
	oa, ob := c.op(a), c.op(b)
	return func(_ *state, l []*ast.Term) int {
		x, y := oa.get(l), ob.get(l)
		return holds(x != nil && y != nil && (ast.Compare(x.Value, y.Value) == 0) == want)
	}
}

func (c *compiler) isKind(o ir.Operand, is func(ast.Value) bool) stmt {
	src := c.op(o)
	return func(_ *state, l []*ast.Term) int {
		t := src.get(l)
		return holds(t != nil && is(t.Value))
	}
}

// holds is the outcome of a test: go on, or the statement is undefined.
func holds(ok bool) int {
	if ok {
		return next
	}
	return 0
}

// set sets local t to v and goes on; an undefined v makes the statement
// undefined.
func set(l []*ast.Term, t int, v *ast.Term) int {
	if v == nil {
		return 0
	}
	l[t] = v
	return next
}

// makeFresh is the statement that sets local t to a new composite.
func makeFresh(t ir.Local, mk func() ast.Value) stmt {
	i := int(t)
	return func(_ *state, l []*ast.Term) int {
		l[i] = &ast.Term{Value: mk(), Location: fresh}
		return next
	}
}

// fresh marks the composites a plan makes (MakeArray, MakeObject, MakeSet):
// only those may be appended to or inserted into. Values of the input, the
// data and builtin results are shared and never modified.
var fresh = &ast.Location{File: "<ireval>"}

// Dot looks key up in src as topdown does: an object member, an array
// element at an integer index, a set element (the key itself); anything
// else is undefined.
func Dot(src, key *ast.Term) *ast.Term {
	if src == nil || key == nil {
		return nil
	}
	switch v := src.Value.(type) {
	case ast.Object:
		return v.Get(key)
	case *ast.Array:
		return v.Get(key)
	case ast.Set:
		if v.Contains(key) {
			return key
		}
	}
	return nil
}

// mergeObjects merges b into a recursively; ok is false when a key holds a
// non-object value on one side and any other value on the other (base and
// virtual documents overlapping), which the evaluator leaves to topdown.
func mergeObjects(a, b ast.Object) (ast.Object, bool) {
	out := ast.NewObjectWithCapacity(a.Len() + b.Len())
	ok := true
	a.Foreach(func(k, v *ast.Term) {
		w := b.Get(k)
		if w == nil {
			out.Insert(k, v)
			return
		}
		vo, ok1 := v.Value.(ast.Object)
		wo, ok2 := w.Value.(ast.Object)
		if ok1 && ok2 {
			if m, merged := mergeObjects(vo, wo); merged {
				out.Insert(k, ast.NewTerm(m))
				return
			}
		}
		ok = false
	})
	b.Foreach(func(k, v *ast.Term) {
		if a.Get(k) == nil {
			out.Insert(k, v)
		}
	})
	return out, ok
}

// call compiles a call of a plan function or of a builtin.
func (c *compiler) call(s *ir.CallStmt) (stmt, error) {
	args, result := c.ops(s.Args), int(s.Result)
	if _, ok := c.funcs[s.Func]; ok {
		fn, err := c.function(s.Func)
		if err != nil {
			return nil, err
		}
		if len(args) != len(fn.params) {
			return nil, unsupported("call of %s with %d arguments, want %d", s.Func, len(args), len(fn.params))
		}
		c.scope.callee[fn] = true
		return func(st *state, l []*ast.Term) int {
			v, r := st.call(fn, args, l)
			return setResult(l, result, v, r)
		}, nil
	}
	bi, err := resolveBuiltin(s.Func, len(args))
	if err != nil {
		return nil, err
	}
	c.maxArgs = max(c.maxArgs, len(args))
	return func(st *state, l []*ast.Term) int {
		v, r := st.builtin(bi, args, l)
		return setResult(l, result, v, r)
	}, nil
}

// setResult sets local t to a call's result v, unless the call ended
// otherwise (r).
func setResult(l []*ast.Term, t int, v *ast.Term, r int) int {
	if r != next {
		return r
	}
	return set(l, t, v)
}

func (c *compiler) callDynamic(path []operand, args []ir.Local, result int) stmt {
	table := c.dynamic
	ops := make([]operand, len(args))
	for i, a := range args {
		ops[i] = operand{local: int(a)}
	}
	return func(st *state, l []*ast.Term) int {
		var sb strings.Builder
		for i, p := range path {
			t := p.get(l)
			if t == nil {
				return 0
			}
			s, ok := t.Value.(ast.String)
			if !ok {
				return 0
			}
			if i > 0 {
				sb.WriteByte(0)
			}
			sb.WriteString(string(s))
		}
		fn, ok := table[sb.String()]
		if !ok || len(fn.params) != len(args) {
			return 0 // no such function: the plan reads the base document instead
		}
		v, r := st.call(fn, ops, l)
		if r != next {
			return r
		}
		if v == nil {
			// As OPA's Wasm target: an undefined function result leaves
			// the whole lookup, three blocks up.
			return 3
		}
		l[result] = v
		return next
	}
}

// walkStmts calls f on every statement of b, nested ones included.
func walkStmts(b *ir.Block, f func(ir.Stmt)) {
	if b == nil {
		return
	}
	for _, s := range b.Stmts {
		f(s)
		switch s := s.(type) {
		case *ir.BlockStmt:
			for _, x := range s.Blocks {
				walkStmts(x, f)
			}
		case *ir.ScanStmt:
			walkStmts(s.Block, f)
		case *ir.NotStmt:
			walkStmts(s.Block, f)
		case *ir.WithStmt:
			walkStmts(s.Block, f)
		}
	}
}

var (
	localType    = reflect.TypeFor[ir.Local]()
	operandType  = reflect.TypeFor[ir.Operand]()
	localsType   = reflect.TypeFor[[]ir.Local]()
	operandsType = reflect.TypeFor[[]ir.Operand]()
)

// walkLocals calls f on every local a statement of b names: every field
// of a statement that is a local, an operand, or a list of them.
func walkLocals(b *ir.Block, f func(ir.Local)) {
	op := func(o ir.Operand) {
		if l, ok := PlainVal(o.Value).(ir.Local); ok {
			f(l)
		}
	}
	walkStmts(b, func(s ir.Stmt) {
		v := reflect.Indirect(reflect.ValueOf(s))
		for i := range v.NumField() {
			switch fv := v.Field(i); fv.Type() {
			case localType:
				f(fv.Interface().(ir.Local))
			case operandType:
				op(fv.Interface().(ir.Operand))
			case localsType:
				for _, l := range fv.Interface().([]ir.Local) {
					f(l)
				}
			case operandsType:
				for _, o := range fv.Interface().([]ir.Operand) {
					op(o)
				}
			}
		}
	})
}

// builtinImpl is a builtin bound to topdown's implementation.
type builtinImpl struct {
	name     string
	f        topdown.BuiltinFunc
	relation bool
}
