package ireval

import (
	"fmt"
	"sort"
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
	pool      statePool
	kinds     map[string]int
	projOnce  sync.Once
	proj      *Projection
}

// StatementKinds counts the IR statements compiled into p (functions
// included), by kind: "DotStmt", "ScanStmt", ...
func (p *Program) StatementKinds() map[string]int {
	out := make(map[string]int, len(p.kinds))
	for k, n := range p.kinds {
		out[k] = n
	}
	return out
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

// Entrypoint is the name of the plan the Program runs.
func (p *Program) Entrypoint() string { return p.entry }

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
	ret    int
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
	// cur is the function being compiled, nil for the plan.
	cur   *function
	kinds map[string]int // statements compiled, by kind
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
	var plan *ir.Plan
	for _, pl := range policy.Plans.Plans {
		if pl.Name == entry {
			plan = pl
		}
	}
	if plan == nil {
		return nil, unsupported("no plan named %q", entry)
	}
	c := &compiler{policy: policy, funcs: map[string]*ir.Func{}, built: map[string]*function{}, busy: map[string]bool{}, dynamic: map[string]*function{}, kinds: map[string]int{}}
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
	p := &Program{entry: entry, policy: policy}
	if data != nil {
		p.data = ast.NewTerm(data)
	}
	maxLocal := int(ir.Data)
	for _, b := range plan.Blocks {
		walkLocals(b, func(l ir.Local) { maxLocal = max(maxLocal, int(l)) })
	}
	p.nlocal = maxLocal + 1
	planCallees := map[*function]bool{}
	planDyn := false
	for _, b := range plan.Blocks {
		cb, err := c.block(b, 1, planCallees, &planDyn)
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
			callees = c.allDynamic(callees)
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
	deepest := 0
	if planDyn {
		planCallees = c.allDynamic(planCallees)
	}
	for g := range planCallees {
		n, err := depth(g, map[*function]bool{})
		if err != nil {
			return nil, err
		}
		deepest = max(deepest, n)
	}
	p.stackSize = p.nlocal + deepest
	p.nmemo = c.nmemo
	p.maxArgs = c.maxArgs
	p.kinds = c.kinds
	for _, f := range c.built {
		p.funcs = append(p.funcs, f)
	}
	sort.Slice(p.funcs, func(i, j int) bool { return p.funcs[i].name < p.funcs[j].name })
	return p, nil
}

func (c *compiler) allDynamic(base map[*function]bool) map[*function]bool {
	out := map[*function]bool{}
	for f := range base {
		out[f] = true
	}
	for _, f := range c.dynamic {
		out[f] = true
	}
	return out
}

func usesDynamicCalls(policy *ir.Policy) bool {
	found := false
	check := func(b *ir.Block) {
		walkStmts(b, func(s ir.Stmt) {
			if _, ok := s.(*ir.CallDynamicStmt); ok {
				found = true
			}
		})
	}
	for _, pl := range policy.Plans.Plans {
		for _, b := range pl.Blocks {
			check(b)
		}
	}
	if policy.Funcs != nil {
		for _, f := range policy.Funcs.Funcs {
			for _, b := range f.Blocks {
				check(b)
			}
		}
	}
	return found
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
	maxLocal := int(f.Return)
	for _, p := range f.Params {
		maxLocal = max(maxLocal, int(p))
	}
	for _, b := range f.Blocks {
		walkLocals(b, func(l ir.Local) { maxLocal = max(maxLocal, int(l)) })
	}
	saved := c.cur
	c.cur = fn
	defer func() { c.cur = saved }()
	var blocks []block
	for i, b := range f.Blocks {
		// ReturnLocalStmt may only end the function, at its top level.
		if i < len(f.Blocks)-1 && containsReturn(b) {
			return nil, unsupported("function %s returns before its last block", name)
		}
		cb, err := c.block(b, 1, fn.callee, &fn.dyn)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, cb)
	}
	if len(f.Blocks) == 0 || !endsWithReturn(f.Blocks[len(f.Blocks)-1]) {
		return nil, unsupported("function %s does not end with a return", name)
	}
	for _, p := range f.Params {
		fn.params = append(fn.params, int(p))
	}
	fn.ret = int(f.Return)
	fn.nlocal = maxLocal + 1
	fn.blocks = blocks
	c.built[name] = fn
	if len(f.Params) == 2 {
		// A function of input and data alone: memoized per evaluation, as
		// OPA's Wasm target does, and reset inside `with`.
		fn.memo = c.nmemo
		c.nmemo++
	}
	return fn, nil
}

func containsReturn(b *ir.Block) bool {
	found := false
	walkStmts(b, func(s ir.Stmt) {
		if _, ok := s.(*ir.ReturnLocalStmt); ok {
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
func (c *compiler) block(b *ir.Block, depth int, callees map[*function]bool, dyn *bool) (block, error) {
	out := make(block, 0, len(b.Stmts))
	for _, s := range b.Stmts {
		cs, err := c.stmt(s, depth, callees, dyn)
		if err != nil {
			return nil, err
		}
		out = append(out, cs)
	}
	return out, nil
}

// plainVal reads an operand's value, which a plan read back from JSON holds
// by pointer.
func plainVal(v ir.Val) ir.Val {
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

func (c *compiler) operand(o ir.Operand) (operand, error) {
	switch v := plainVal(o.Value).(type) {
	case ir.Local:
		return operand{local: int(v)}, nil
	case ir.StringIndex:
		if int(v) < 0 || int(v) >= len(c.strs) {
			return operand{}, unsupported("string constant %d out of range", v)
		}
		return operand{local: -1, c: c.strs[v]}, nil
	case ir.Bool:
		return operand{local: -1, c: ast.InternedTerm(bool(v))}, nil
	default:
		return operand{}, unsupported("operand of type %T", o.Value)
	}
}

func (c *compiler) operands(os []ir.Operand) ([]operand, error) {
	out := make([]operand, len(os))
	for i, o := range os {
		var err error
		if out[i], err = c.operand(o); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *compiler) str(i int) (*ast.Term, error) {
	if i < 0 || i >= len(c.strs) {
		return nil, unsupported("string constant %d out of range", i)
	}
	return c.strs[i], nil
}

// stmt compiles one statement.
func (c *compiler) stmt(s ir.Stmt, depth int, callees map[*function]bool, dyn *bool) (stmt, error) {
	c.kinds[fmt.Sprintf("%T", s)[len("*ir."):]]++
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
			cb, err := c.block(b, depth+1, callees, dyn)
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
		body, err := c.block(s.Block, 1, callees, dyn)
		if err != nil {
			return nil, err
		}
		return scanStmt(int(s.Source), int(s.Key), int(s.Value), body), nil

	case *ir.NotStmt:
		body, err := c.block(s.Block, 1, callees, dyn)
		if err != nil {
			return nil, err
		}
		return func(st *state, l []*ast.Term) int {
			switch r := body.run(st, l); r {
			case next:
				return 0 // the negated block held: not is undefined
			case 0:
				return next
			default:
				return r
			}
		}, nil

	case *ir.WithStmt:
		body, err := c.block(s.Block, 1, callees, dyn)
		if err != nil {
			return nil, err
		}
		val, err := c.operand(s.Value)
		if err != nil {
			return nil, err
		}
		path := make([]*ast.Term, len(s.Path))
		for i, idx := range s.Path {
			if path[i], err = c.str(idx); err != nil {
				return nil, err
			}
		}
		return withStmt(int(s.Local), path, val, body), nil

	case *ir.CallStmt:
		return c.call(s, callees)

	case *ir.CallDynamicStmt:
		if depth <= 3 {
			return nil, unsupported("dynamic call outside the planner's block structure")
		}
		*dyn = true
		path, err := c.operands(s.Path)
		if err != nil {
			return nil, err
		}
		args := make([]int, len(s.Args))
		for i, a := range s.Args {
			args[i] = int(a)
		}
		return c.callDynamic(path, args, int(s.Result)), nil

	case *ir.DotStmt:
		src, err := c.operand(s.Source)
		if err != nil {
			return nil, err
		}
		key, err := c.operand(s.Key)
		if err != nil {
			return nil, err
		}
		target := int(s.Target)
		return func(_ *state, l []*ast.Term) int {
			v := dot(src.get(l), key.get(l))
			if v == nil {
				return 0
			}
			l[target] = v
			return next
		}, nil

	case *ir.LenStmt:
		src, err := c.operand(s.Source)
		if err != nil {
			return nil, err
		}
		target := int(s.Target)
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
		}, nil

	case *ir.EqualStmt, *ir.NotEqualStmt:
		var a, b ir.Operand
		want := true
		if e, ok := s.(*ir.EqualStmt); ok {
			a, b = e.A, e.B
		} else {
			ne := s.(*ir.NotEqualStmt)
			a, b, want = ne.A, ne.B, false
		}
		oa, err := c.operand(a)
		if err != nil {
			return nil, err
		}
		ob, err := c.operand(b)
		if err != nil {
			return nil, err
		}
		return func(_ *state, l []*ast.Term) int {
			x, y := oa.get(l), ob.get(l)
			if x == nil || y == nil {
				return 0
			}
			if (ast.Compare(x.Value, y.Value) == 0) != want {
				return 0
			}
			return next
		}, nil

	case *ir.IsArrayStmt:
		return c.isKind(s.Source, func(v ast.Value) bool { _, ok := v.(*ast.Array); return ok })
	case *ir.IsObjectStmt:
		return c.isKind(s.Source, func(v ast.Value) bool { _, ok := v.(ast.Object); return ok })
	case *ir.IsSetStmt:
		return c.isKind(s.Source, func(v ast.Value) bool { _, ok := v.(ast.Set); return ok })

	case *ir.IsDefinedStmt:
		src := int(s.Source)
		return func(_ *state, l []*ast.Term) int {
			if l[src] == nil {
				return 0
			}
			return next
		}, nil

	case *ir.IsUndefinedStmt:
		src := int(s.Source)
		return func(_ *state, l []*ast.Term) int {
			if l[src] != nil {
				return 0
			}
			return next
		}, nil

	case *ir.ResetLocalStmt:
		return setLocal(int(s.Target), nil, next), nil

	case *ir.AssignIntStmt:
		return setLocal(int(s.Target), intTerm(s.Value), next), nil

	case *ir.AssignVarStmt:
		src, err := c.operand(s.Source)
		if err != nil {
			return nil, err
		}
		t := int(s.Target)
		return func(_ *state, l []*ast.Term) int {
			l[t] = src.get(l)
			return next
		}, nil

	case *ir.AssignVarOnceStmt:
		src, err := c.operand(s.Source)
		if err != nil {
			return nil, err
		}
		t := int(s.Target)
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
		}, nil

	case *ir.MakeNullStmt:
		return setLocal(int(s.Target), ast.InternedNullTerm, next), nil

	case *ir.MakeNumberIntStmt:
		return setLocal(int(s.Target), intTerm(s.Value), next), nil

	case *ir.MakeNumberRefStmt:
		lit, err := c.str(s.Index)
		if err != nil {
			return nil, err
		}
		// The literal as the parser read it: topdown's constant term.
		return setLocal(int(s.Target), ast.NewTerm(ast.Number(lit.Value.(ast.String))), next), nil

	case *ir.MakeArrayStmt:
		t, n := int(s.Target), int(max(s.Capacity, 0))
		return func(_ *state, l []*ast.Term) int {
			l[t] = &ast.Term{Value: ast.NewArrayWithCapacity(n), Location: fresh}
			return next
		}, nil

	case *ir.MakeObjectStmt:
		t := int(s.Target)
		return func(_ *state, l []*ast.Term) int {
			l[t] = &ast.Term{Value: ast.NewObject(), Location: fresh}
			return next
		}, nil

	case *ir.MakeSetStmt:
		t := int(s.Target)
		return func(_ *state, l []*ast.Term) int {
			l[t] = &ast.Term{Value: ast.NewSet(), Location: fresh}
			return next
		}, nil

	case *ir.ArrayAppendStmt:
		val, err := c.operand(s.Value)
		if err != nil {
			return nil, err
		}
		arr := int(s.Array)
		return func(st *state, l []*ast.Term) int {
			t, v := l[arr], val.get(l)
			if t == nil || v == nil {
				return 0
			}
			a, ok := t.Value.(*ast.Array)
			if !ok || t.Location != fresh {
				return st.internal("array append to a value the plan did not make")
			}
			t.Value = a.Append(v)
			return next
		}, nil

	case *ir.ObjectInsertStmt, *ir.ObjectInsertOnceStmt:
		var k, v ir.Operand
		var o ir.Local
		once := false
		if x, ok := s.(*ir.ObjectInsertStmt); ok {
			k, v, o = x.Key, x.Value, x.Object
		} else {
			x := s.(*ir.ObjectInsertOnceStmt)
			k, v, o, once = x.Key, x.Value, x.Object, true
		}
		key, err := c.operand(k)
		if err != nil {
			return nil, err
		}
		val, err := c.operand(v)
		if err != nil {
			return nil, err
		}
		obj := int(o)
		return func(st *state, l []*ast.Term) int {
			t, kt, vt := l[obj], key.get(l), val.get(l)
			if t == nil || kt == nil || vt == nil {
				return 0
			}
			m, ok := t.Value.(ast.Object)
			if !ok || t.Location != fresh {
				return st.internal("object insert into a value the plan did not make")
			}
			if once {
				if cur := m.Get(kt); cur != nil && ast.Compare(cur.Value, vt.Value) != 0 {
					return st.conflict("object keys must be unique")
				}
			}
			m.Insert(kt, vt)
			return next
		}, nil

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
		}, nil

	case *ir.SetAddStmt:
		val, err := c.operand(s.Value)
		if err != nil {
			return nil, err
		}
		set := int(s.Set)
		return func(st *state, l []*ast.Term) int {
			t, v := l[set], val.get(l)
			if t == nil || v == nil {
				return 0
			}
			sv, ok := t.Value.(ast.Set)
			if !ok || t.Location != fresh {
				return st.internal("set add to a value the plan did not make")
			}
			sv.Add(v)
			return next
		}, nil

	default:
		return nil, unsupported("statement %T", s)
	}
}

func (c *compiler) isKind(o ir.Operand, is func(ast.Value) bool) (stmt, error) {
	src, err := c.operand(o)
	if err != nil {
		return nil, err
	}
	return func(_ *state, l []*ast.Term) int {
		t := src.get(l)
		if t == nil || !is(t.Value) {
			return 0
		}
		return next
	}, nil
}

// fresh marks the composites a plan makes (MakeArray, MakeObject, MakeSet):
// only those may be appended to or inserted into. Values of the input, the
// data and builtin results are shared and never modified.
var fresh = &ast.Location{File: "<ireval>"}

func intTerm(v int64) *ast.Term {
	return ast.InternedTerm(int(v))
}

// dot looks key up in src as topdown does: an object member, an array
// element at an integer index, a set element (the key itself); anything
// else is undefined.
func dot(src, key *ast.Term) *ast.Term {
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
		if !ok1 || !ok2 {
			ok = false
			return
		}
		m, ok3 := mergeObjects(vo, wo)
		if !ok3 {
			ok = false
			return
		}
		out.Insert(k, ast.NewTerm(m))
	})
	b.Foreach(func(k, v *ast.Term) {
		if a.Get(k) == nil {
			out.Insert(k, v)
		}
	})
	return out, ok
}

// call compiles a call of a plan function or of a builtin.
func (c *compiler) call(s *ir.CallStmt, callees map[*function]bool) (stmt, error) {
	args, err := c.operands(s.Args)
	if err != nil {
		return nil, err
	}
	result := int(s.Result)
	if _, ok := c.funcs[s.Func]; ok {
		fn, err := c.function(s.Func)
		if err != nil {
			return nil, err
		}
		if len(args) != len(fn.params) {
			return nil, unsupported("call of %s with %d arguments, want %d", s.Func, len(args), len(fn.params))
		}
		callees[fn] = true
		return func(st *state, l []*ast.Term) int {
			v, r := st.call(fn, args, l)
			if r != next {
				return r
			}
			if v == nil {
				return 0
			}
			l[result] = v
			return next
		}, nil
	}
	bi, err := resolveBuiltin(s.Func, len(args))
	if err != nil {
		return nil, err
	}
	c.maxArgs = max(c.maxArgs, len(args))
	return func(st *state, l []*ast.Term) int {
		v, r := st.builtin(bi, args, l)
		if r != next {
			return r
		}
		if v == nil {
			return 0
		}
		l[result] = v
		return next
	}, nil
}

func (c *compiler) callDynamic(path []operand, args []int, result int) stmt {
	table := c.dynamic
	ops := make([]operand, len(args))
	for i, a := range args {
		ops[i] = operand{local: a}
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

// walkLocals calls f on every local a statement of b names.
func walkLocals(b *ir.Block, f func(ir.Local)) {
	op := func(o ir.Operand) {
		if l, ok := plainVal(o.Value).(ir.Local); ok {
			f(l)
		}
	}
	walkStmts(b, func(s ir.Stmt) {
		switch s := s.(type) {
		case *ir.ReturnLocalStmt:
			f(s.Source)
		case *ir.CallStmt:
			for _, a := range s.Args {
				op(a)
			}
			f(s.Result)
		case *ir.CallDynamicStmt:
			for _, a := range s.Args {
				f(a)
			}
			for _, p := range s.Path {
				op(p)
			}
			f(s.Result)
		case *ir.DotStmt:
			op(s.Source)
			op(s.Key)
			f(s.Target)
		case *ir.LenStmt:
			op(s.Source)
			f(s.Target)
		case *ir.ScanStmt:
			f(s.Source)
			f(s.Key)
			f(s.Value)
		case *ir.AssignIntStmt:
			f(s.Target)
		case *ir.AssignVarStmt:
			op(s.Source)
			f(s.Target)
		case *ir.AssignVarOnceStmt:
			op(s.Source)
			f(s.Target)
		case *ir.ResetLocalStmt:
			f(s.Target)
		case *ir.MakeNullStmt:
			f(s.Target)
		case *ir.MakeNumberIntStmt:
			f(s.Target)
		case *ir.MakeNumberRefStmt:
			f(s.Target)
		case *ir.MakeArrayStmt:
			f(s.Target)
		case *ir.MakeObjectStmt:
			f(s.Target)
		case *ir.MakeSetStmt:
			f(s.Target)
		case *ir.EqualStmt:
			op(s.A)
			op(s.B)
		case *ir.NotEqualStmt:
			op(s.A)
			op(s.B)
		case *ir.IsArrayStmt:
			op(s.Source)
		case *ir.IsObjectStmt:
			op(s.Source)
		case *ir.IsSetStmt:
			op(s.Source)
		case *ir.IsDefinedStmt:
			f(s.Source)
		case *ir.IsUndefinedStmt:
			f(s.Source)
		case *ir.ArrayAppendStmt:
			op(s.Value)
			f(s.Array)
		case *ir.ObjectInsertStmt:
			op(s.Key)
			op(s.Value)
			f(s.Object)
		case *ir.ObjectInsertOnceStmt:
			op(s.Key)
			op(s.Value)
			f(s.Object)
		case *ir.ObjectMergeStmt:
			f(s.A)
			f(s.B)
			f(s.Target)
		case *ir.SetAddStmt:
			op(s.Value)
			f(s.Set)
		case *ir.WithStmt:
			f(s.Local)
			op(s.Value)
		}
	})
}

// builtinImpl is a builtin bound to topdown's implementation.
type builtinImpl struct {
	name     string
	f        topdown.BuiltinFunc
	relation bool
}
