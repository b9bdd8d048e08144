package ireval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// ErrUndefined is returned by Eval when the plan produced no result.
var ErrUndefined = errors.New("the plan left its result undefined")

// Kind classifies an evaluation error.
type Kind int

const (
	// KindCancelled: the deadline passed or the context was cancelled.
	KindCancelled Kind = iota + 1
	// KindConflict: a complete rule, function or object key with two
	// values (topdown's eval_conflict_error).
	KindConflict
	// KindBuiltin: a builtin returned an error (topdown's strict builtin
	// errors).
	KindBuiltin
	// KindInternal: the plan did something this evaluator does not expect;
	// the caller must not trust the compiled path for this input.
	KindInternal
)

// Error is an evaluation that ended without a result.
type Error struct {
	Kind    Kind
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// IsCancelled reports whether err is an evaluation stopped by its deadline
// or context.
func IsCancelled(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindCancelled
}

// state is everything one evaluation mutates. States are pooled per
// Program; a state is used by one goroutine at a time.
type state struct {
	stack   []*ast.Term
	sp      int
	memo    []*ast.Term
	memoHas []uint8 // 0: not computed, 1: defined, 2: undefined
	results []*ast.Term
	args    []*ast.Term // operands of the builtin being called
	retval  *ast.Term
	out     *ast.Term   // output of a builtin
	outs    []*ast.Term // outputs of a relation
	err     error

	// Cancellation: checked every checkEvery steps (function calls, loop
	// iterations, builtin calls) so that a runaway plan stops at its
	// deadline without a timer or a goroutine per evaluation.
	ctx      context.Context
	deadline time.Time
	steps    uint32
	stopped  bool

	bctx    topdown.BuiltinContext
	cancel  *cancelView
	capture func(*ast.Term) error
	collect func(*ast.Term) error
}

const checkEvery = 64

func (p *Program) getState() *state {
	if st, ok := p.pool.Get().(*state); ok {
		return st
	}
	st := &state{
		stack:   make([]*ast.Term, p.stackSize),
		memo:    make([]*ast.Term, p.nmemo),
		memoHas: make([]uint8, p.nmemo),
		args:    make([]*ast.Term, p.maxArgs),
	}
	st.cancel = &cancelView{st: st}
	st.capture = func(t *ast.Term) error {
		st.out = t
		return nil
	}
	st.collect = func(t *ast.Term) error {
		st.outs = append(st.outs, t)
		return nil
	}
	return st
}

func (p *Program) putState(st *state) {
	clear(st.stack)
	clear(st.memo)
	clear(st.memoHas)
	clear(st.results)
	st.results = st.results[:0]
	clear(st.args)
	clear(st.outs)
	st.outs = st.outs[:0]
	st.sp, st.retval, st.out, st.err = 0, nil, nil, nil
	st.ctx, st.deadline, st.steps, st.stopped = nil, time.Time{}, 0, false
	st.bctx = topdown.BuiltinContext{}
	p.pool.Put(st)
}

// EvalOptions bound one evaluation.
type EvalOptions struct {
	// Deadline, when not zero, stops the evaluation with a KindCancelled
	// error once passed.
	Deadline time.Time
}

// Eval evaluates the plan on input (nil: no input document) and returns
// the value its query bound to "result", as the engine's query
// `data.<path>` has it. The errors are ErrUndefined and *Error.
func (p *Program) Eval(ctx context.Context, input ast.Value, opts EvalOptions) (ast.Value, error) {
	rs, err := p.EvalResultSet(ctx, input, opts)
	if err != nil {
		return nil, err
	}
	switch len(rs) {
	case 0:
		return nil, ErrUndefined
	case 1:
	default:
		return nil, &Error{Kind: KindInternal, Message: fmt.Sprintf("the plan produced %d results", len(rs))}
	}
	obj, _ := rs[0].(ast.Object)
	t := obj.Get(resultKey)
	if t == nil {
		return nil, ErrUndefined
	}
	return t.Value, nil
}

var resultKey = ast.StringTerm("result")

// EvalResultSet evaluates the plan and returns its result set: one object
// of variable bindings per result, as topdown's result set has them.
func (p *Program) EvalResultSet(ctx context.Context, input ast.Value, opts EvalOptions) (rs []ast.Value, err error) {
	st := p.getState()
	defer p.putState(st)
	defer func() {
		// A panic is a bug of this evaluator (or of a builtin on a value
		// topdown would not pass it): fail closed, never crash.
		if r := recover(); r != nil {
			rs, err = nil, &Error{Kind: KindInternal, Message: fmt.Sprintf("evaluation panicked: %v", r)}
		}
	}()
	st.ctx, st.deadline = ctx, opts.Deadline
	// Only the builtins that reach outside the process (refused by
	// resolveBuiltin) use the cache, the clock, the seed or the runtime.
	st.bctx = topdown.BuiltinContext{Context: ctx, Cancel: st.cancel}
	if st.expired() {
		return nil, st.cancelledErr()
	}
	l := st.push(p.nlocal)
	if input != nil {
		l[0] = ast.NewTerm(input)
	}
	l[1] = p.data
	for _, b := range p.blocks {
		switch r := b.run(st, l); r {
		case fail:
			return nil, st.err
		case ret:
			return nil, &Error{Kind: KindInternal, Message: "return outside a function"}
		}
	}
	out := make([]ast.Value, len(st.results))
	for i, t := range st.results {
		out[i] = t.Value
	}
	return out, nil
}

// push reserves n locals on the state's stack.
func (st *state) push(n int) []*ast.Term {
	if st.sp+n > len(st.stack) {
		// Frames in use keep their own slices of the old array.
		grown := make([]*ast.Term, 2*(st.sp+n))
		copy(grown, st.stack)
		st.stack = grown
	}
	l := st.stack[st.sp : st.sp+n : st.sp+n]
	st.sp += n
	return l
}

func (st *state) pop(n int) {
	st.sp -= n
	clear(st.stack[st.sp : st.sp+n])
}

// tick counts one step and reports whether the evaluation must stop.
func (st *state) tick() bool {
	st.steps++
	if st.steps%checkEvery != 0 {
		return st.stopped
	}
	return st.expired()
}

func (st *state) expired() bool {
	if !st.stopped {
		st.stopped = st.ctx != nil && st.ctx.Err() != nil || !st.deadline.IsZero() && !time.Now().Before(st.deadline)
	}
	return st.stopped
}

func (st *state) cancelledErr() error {
	if st.ctx != nil && st.ctx.Err() != nil {
		return &Error{Kind: KindCancelled, Message: "evaluation cancelled", Err: st.ctx.Err()}
	}
	return &Error{Kind: KindCancelled, Message: "evaluation deadline exceeded"}
}

func (st *state) stop() int {
	st.err = st.cancelledErr()
	return fail
}

func (st *state) conflict(msg string) int {
	st.err = &Error{Kind: KindConflict, Message: "eval_conflict_error: " + msg}
	return fail
}

func (st *state) internal(msg string) int {
	st.err = &Error{Kind: KindInternal, Message: msg}
	return fail
}

// cancelView is the topdown.Cancel handed to builtins, so that the ones
// that loop (numbers.range, concat, ...) stop at the same deadline.
type cancelView struct{ st *state }

func (c *cancelView) Cancel() { c.st.stopped = true }

func (c *cancelView) Cancelled() bool { return c.st.tick() }

// call runs fn with args read from the caller's frame l.
func (st *state) call(fn *function, args []operand, l []*ast.Term) (*ast.Term, int) {
	if fn.memo >= 0 {
		switch st.memoHas[fn.memo] {
		case 1:
			return st.memo[fn.memo], next
		case 2:
			return nil, next
		}
	}
	if st.tick() {
		return nil, st.stop()
	}
	fl := st.push(fn.nlocal)
	for i, p := range fn.params {
		fl[p] = args[i].get(l)
	}
	var v *ast.Term
	for _, b := range fn.blocks {
		r := b.run(st, fl)
		if r == ret {
			v = st.retval
			st.retval = nil
			break
		}
		if r == fail {
			st.pop(fn.nlocal)
			return nil, fail
		}
	}
	st.pop(fn.nlocal)
	if fn.memo >= 0 {
		if v != nil {
			st.memo[fn.memo], st.memoHas[fn.memo] = v, 1
		} else {
			st.memoHas[fn.memo] = 2
		}
	}
	return v, next
}

// builtin calls a builtin with operands read from l. A nil result with next
// is undefined.
func (st *state) builtin(bi *builtinImpl, ops []operand, l []*ast.Term) (*ast.Term, int) {
	if st.tick() {
		return nil, st.stop()
	}
	args := st.args[:len(ops)]
	for i, o := range ops {
		t := o.get(l)
		if t == nil {
			return nil, next
		}
		args[i] = t
	}
	var err error
	if bi.relation {
		st.outs = st.outs[:0]
		err = bi.f(st.bctx, args, st.collect)
	} else {
		st.out = nil
		err = bi.f(st.bctx, args, st.capture)
	}
	clear(args)
	if err != nil {
		if st.stopped {
			return nil, st.stop()
		}
		var h topdown.Halt
		if errors.As(err, &h) {
			err = h.Err
		}
		var te *topdown.Error
		if errors.As(err, &te) && te.Code == topdown.CancelErr {
			return nil, st.stop()
		}
		st.err = &Error{Kind: KindBuiltin, Message: bi.name, Err: err}
		return nil, fail
	}
	out := st.out
	st.out = nil
	if bi.relation {
		out = ast.NewTerm(ast.NewArray(append([]*ast.Term(nil), st.outs...)...))
		clear(st.outs)
		st.outs = st.outs[:0]
	}
	return out, next
}

// scanStmt iterates over an array, object or set in topdown's order
// (index order; sorted keys; sorted elements); a scalar has no elements.
func scanStmt(src, key, val int, body block) stmt {
	return func(st *state, l []*ast.Term) int {
		t := l[src]
		if t == nil {
			return next
		}
		switch v := t.Value.(type) {
		case *ast.Array:
			for i := 0; i < v.Len(); i++ {
				if r := scanOne(st, l, key, val, body, ast.InternedTerm(i), v.Elem(i)); r != next {
					return r
				}
			}
		case ast.Object:
			r := next
			v.Until(func(k, x *ast.Term) bool {
				r = scanOne(st, l, key, val, body, k, x)
				return r != next
			})
			return r
		case ast.Set:
			for _, e := range v.Slice() {
				if r := scanOne(st, l, key, val, body, e, e); r != next {
					return r
				}
			}
		}
		return next
	}
}

// scanOne runs a scan's body on one element: next to go on with the
// following one, or how the scan ends.
func scanOne(st *state, l []*ast.Term, key, val int, body block, k, x *ast.Term) int {
	if st.tick() {
		return st.stop()
	}
	l[key], l[val] = k, x
	if r := body.run(st, l); r != 0 {
		return r
	}
	return next
}

// withStmt replaces a local (input or data), or the document at a path
// below it, while its block runs, with memoized results reset as OPA's
// Wasm target does.
func withStmt(local int, path []*ast.Term, val operand, body block) stmt {
	return func(st *state, l []*ast.Term) int {
		v := val.get(l)
		if v == nil && len(path) > 0 {
			return st.internal("with of an undefined value")
		}
		// An undefined value with no path is the planner restoring an
		// undefined input (no input document) for the rest of a query.
		saved := l[local]
		replaced, ok := upsert(saved, path, v)
		if !ok {
			return st.internal("with on a value that is not an object")
		}
		memo, memoHas := st.memo, st.memoHas
		st.memo, st.memoHas = make([]*ast.Term, len(memo)), make([]uint8, len(memoHas))
		l[local] = replaced
		r := body.run(st, l)
		l[local] = saved
		st.memo, st.memoHas = memo, memoHas
		return r
	}
}

// upsert returns root with v at path, copying the objects along the path
// (root is shared). A missing or non-object node on the way is replaced by
// an object, as OPA's Wasm target does; a root that is not an object
// cannot take a path.
func upsert(root *ast.Term, path []*ast.Term, v *ast.Term) (*ast.Term, bool) {
	if len(path) == 0 {
		return v, true
	}
	var o ast.Object
	if root != nil {
		var ok bool
		if o, ok = root.Value.(ast.Object); !ok {
			return nil, false
		}
	}
	top := copyOrNew(o)
	cur := top
	for _, seg := range path[:len(path)-1] {
		var o ast.Object
		if t := cur.Get(seg); t != nil {
			o, _ = t.Value.(ast.Object)
		}
		child := copyOrNew(o)
		cur.Insert(seg, ast.NewTerm(child))
		cur = child
	}
	cur.Insert(path[len(path)-1], v)
	return ast.NewTerm(top), true
}

// copyOrNew is a shallow copy of o, or a new empty object when o is nil:
// one object either way, none made to be thrown away.
func copyOrNew(o ast.Object) ast.Object {
	if o == nil {
		return ast.NewObject()
	}
	out := ast.NewObjectWithCapacity(o.Len())
	o.Foreach(func(k, v *ast.Term) { out.Insert(k, v) })
	return out
}
